"""InRank: incremental low-rank learning of the GPT-2 MLP layers (paper 004, Algorithms 2 and 3).

Every MLP matrix (``blocks.mlp.fc_in``, ``blocks.mlp.fc_out``; ``y = x W + b``, ``W`` of shape d_in × d_out) is
written ``W = W_0 + U V`` with ``W_0`` the frozen initial weight, ``U`` (d_in × R) and ``V`` (R × d_out).
Following the paper (and its reference implementation), ``U V`` always uses ``r + b`` modes: the rank
``r`` and ``b`` buffer modes, so that its spectrum beyond ``r`` can be measured.

- Start (Alg. 2, lines 1–3): the gradient ``G = ∂L/∂W`` at ``W_0`` on the first batch, ``G = Σ s_i a_i c_iᵀ``;
  ``U[:, i] = −ε a_i``, ``V[i] = ε c_iᵀ`` for ``i < r₀ + b``, so ``U V = −ε² Σ a_i c_iᵀ`` (a descent direction).
- Every ``check_every`` steps (line 7): with ``s`` the singular values of ``M = U V``, the explained ratio is
  ``g(M, r, b) = 1 − var(s_{r+1..r+b}) / var(s_{1..r+b})`` (population variances; ``g = 1`` when
  ``s_{1..r+b}`` are all equal, e.g. all 0); the rank becomes the smallest ``r' ≥ r`` with ``g(M, r', b) ≥ α``
  (``r' ≤ R − b``, the allocation). The new modes ``r + b .. r' + b`` start at small random values (line 8):
  entries ``ε N(0, 1/d_in)`` in ``U`` and ``ε N(0, 1/d_out)`` in ``V``.
- InRank-Efficient (Alg. 3): after ``efficient_after`` steps (default: one epoch), ``W_0 + U V`` is replaced by
  its best rank-``r`` factorisation ``U* V*`` (``U* = a √s``, ``V* = √s cᵀ``, buffer discarded) and training
  continues on ``U*, V*`` (``W_0`` is gone). Adam's moments restart; the learning-rate schedule runs on.

Rank changes without recompilation: ``U, V`` are allocated at ``R`` columns (default ``min(d_in, d_out) // 2``,
as in the reference implementation) and the modes beyond ``r + b`` are masked (they are zero, get zero
gradient and zero Adam update). The jitted step is therefore traced once for the InRank phase and once
more after the switch to the fixed-rank phase (``InRankResult.n_traces`` counts it); the price is that the
InRank phase computes with all ``R`` columns. In the fixed-rank phase the layers of the scanned stack share
one width, the largest rank over layers, the other layers' extra columns being masked zeros.

This module is the rule alone (pure functions of models and spectra); ``_inrank_train`` trains with it through
the training loop, compares the modes and writes the report; ``_plots.plot_inrank_ranks`` draws the ranks.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._distributed import to_host
from ._spectra import product_singular_values

__all__ = [
    "InRankConfig",
    "InRankLinear",
    "LowRankLinear",
    "explained_ratio",
    "explained_ratios",
    "grow_rank",
    "to_inrank",
    "update_ranks",
    "to_low_rank",
    "mlp_ranks",
    "parameter_count",
    "phase",
    "trainable",
]

F32 = jnp.float32
_MLP = ("fc_in", "fc_out")


@dataclasses.dataclass(frozen=True)
class InRankConfig:
    """InRank hyper-parameters; defaults are the paper's (r₀ = 2, b = 100, α = 0.9).

    Attributes:
        init_rank: r₀.
        buffer: b (≥ 1).
        threshold: α, the explained ratio to maintain.
        check_every: steps between rank checks (the paper checks every step, "relaxed to every k").
        eps: ε, the scale of the initial and of the added modes.
        max_rank: R, the columns allocated to ``U, V`` including the buffer (default ``min(d_in, d_out) // 2``).
        efficient_after: steps of InRank before the switch to fixed rank in InRank-Efficient (default: one epoch).
    """

    init_rank: int = 2
    buffer: int = 100
    threshold: float = 0.9
    check_every: int = 10
    eps: float = 1e-3
    max_rank: int | None = None
    efficient_after: int | None = None

    def __post_init__(self):
        if self.init_rank < 1 or self.buffer < 1 or self.check_every < 1:
            raise ValueError(f"need init_rank >= 1, buffer >= 1, check_every >= 1; got {self}")
        if not 0 < self.threshold < 1 or self.eps < 0:
            raise ValueError(f"need 0 < threshold < 1 and eps >= 0; got {self.threshold}, {self.eps}")

    def columns(self, d_in: int, d_out: int) -> int:
        """R for a d_in × d_out matrix, unchecked: ``max_rank``, or ``min(d_in, d_out) // 2``."""
        return min(d_in, d_out) // 2 if self.max_rank is None else self.max_rank

    def allocation(self, d_in: int, d_out: int) -> int:
        """R for a d_in × d_out matrix, checked: it holds ``init_rank + buffer`` and fits the matrix."""
        r = self.columns(d_in, d_out)
        if not self.init_rank + self.buffer <= r <= min(d_in, d_out):
            raise ValueError(
                f"need init_rank + buffer = {self.init_rank + self.buffer} <= max_rank = {r} <= "
                f"min(d_in, d_out) = {min(d_in, d_out)}; lower buffer or set max_rank"
            )
        return r


# ----------------------------------------------------------------------------- the explained ratio


def explained_ratio(s, rank: int, buffer: int) -> float:
    """``g(M, r, b) = 1 − var(s_{r+1..r+b}) / var(s_{1..r+b})`` for singular values ``s`` (zero-padded to r + b)."""
    s = np.sort(np.abs(np.asarray(s, np.float64)))[::-1]
    s = np.pad(s, (0, max(0, rank + buffer - s.size)))
    total = s[: rank + buffer].var()
    return 1.0 if total == 0 else float(1.0 - s[rank : rank + buffer].var() / total)


def explained_ratios(s, buffer: int) -> np.ndarray:
    """``g(M, r, b)`` for every ``r = 0 .. len(s) − b`` (last axis of ``s``, sorted descending), via prefix sums."""
    s = np.sort(np.abs(np.asarray(s, np.float64)), axis=-1)[..., ::-1]
    n = s.shape[-1] - buffer + 1
    if n < 1:
        raise ValueError(f"need at least buffer = {buffer} singular values, got {s.shape[-1]}")
    zero = np.zeros(s.shape[:-1] + (1,))
    c1 = np.concatenate([zero, np.cumsum(s, -1)], -1)
    c2 = np.concatenate([zero, np.cumsum(s * s, -1)], -1)
    r = np.arange(n)

    def var(a, b):  # population variance of s[a:b], b − a > 0
        m = b - a
        mean = (c1[..., b] - c1[..., a]) / m
        return np.maximum((c2[..., b] - c2[..., a]) / m - mean * mean, 0.0)

    total = var(np.zeros_like(r), r + buffer)
    tail = var(r, r + buffer)
    scale = np.maximum(c2[..., -1:] / s.shape[-1], np.finfo(np.float64).tiny)
    flat = total <= 1e-12 * scale  # all of s_{1..r+b} equal (up to rounding)
    return np.where(flat, 1.0, 1.0 - tail / np.where(flat, 1.0, total))


def grow_rank(s, rank: int, *, buffer: int, threshold: float) -> int:
    """Algorithm 2, line 7: the smallest ``r' ≥ rank`` with ``g(M, r', b) ≥ threshold``, at most ``len(s) − b``."""
    g = explained_ratios(s, buffer)
    cap = g.size - 1
    if rank > cap:
        raise ValueError(f"rank {rank} + buffer {buffer} exceeds the {len(s)} singular values")
    ok = np.flatnonzero(g[rank:] >= threshold)
    return int(rank + ok[0]) if ok.size else cap


# ----------------------------------------------------------------------------- layers


class InRankLinear(eqx.Module):
    """``y = x (W_0 + U diag(m) V) + b`` with ``W_0`` frozen and ``m_i = [i < n_active]``, ``n_active = r + b``."""

    w0: jax.Array
    u: jax.Array
    v: jax.Array
    bias: jax.Array
    n_active: jax.Array
    buffer: int = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        dt = x.dtype
        mask = (jnp.arange(self.u.shape[-1]) < self.n_active).astype(dt)
        w0 = jax.lax.stop_gradient(self.w0).astype(dt)
        return x @ w0 + ((x @ self.u.astype(dt)) * mask) @ self.v.astype(dt) + self.bias.astype(dt)


class LowRankLinear(eqx.Module):
    """``y = x U diag(m) V + b`` with ``m_i = [i < rank]`` (Algorithm 3's fixed-rank layer)."""

    u: jax.Array
    v: jax.Array
    bias: jax.Array
    rank: jax.Array

    def __call__(self, x: jax.Array) -> jax.Array:
        dt = x.dtype
        mask = (jnp.arange(self.u.shape[-1]) < self.rank).astype(dt)
        return ((x @ self.u.astype(dt)) * mask) @ self.v.astype(dt) + self.bias.astype(dt)


def _get(model, name):
    return getattr(model.blocks.mlp, name)


def _replace(model, name, layer):
    return eqx.tree_at(lambda m: getattr(m.blocks.mlp, name), model, layer)


def to_inrank(model, grads: dict, *, config: InRankConfig = InRankConfig()):
    """Algorithm 2, lines 1–3: reparametrise ``model``'s MLP matrices as ``W_0 + U V``.

    ``grads[name]`` is ``∂L/∂W`` of ``blocks.mlp.<name>.weight`` (layers, d_in, d_out) at the initialisation,
    for ``name`` in ``fc_in``, ``fc_out``. With ``eps = 0`` the model computes exactly what it did before.
    """
    for name in _MLP:
        lin = _get(model, name)
        w = lin.weight
        if grads[name].shape != w.shape:
            raise ValueError(f"gradient for {name} has shape {grads[name].shape}, weight {w.shape}")
        n_layers, d_in, d_out = w.shape
        R = config.allocation(d_in, d_out)
        k = config.init_rank + config.buffer
        a, _, ct = jnp.linalg.svd(grads[name].astype(F32), full_matrices=False)
        eps = F32(config.eps)
        u = jnp.zeros((n_layers, d_in, R), F32).at[:, :, :k].set(-eps * a[:, :, :k])
        v = jnp.zeros((n_layers, R, d_out), F32).at[:, :k, :].set(eps * ct[:, :k, :])
        layer = InRankLinear(
            w0=w.astype(F32),
            u=u,
            v=v,
            bias=lin.bias,
            n_active=jnp.full((n_layers,), k, jnp.int32),
            buffer=config.buffer,
        )
        model = _replace(model, name, layer)
    return model


@jax.jit
def _layer_spectrum(u, v, n_active):
    mask = (jnp.arange(u.shape[-1]) < n_active[:, None]).astype(F32)
    return product_singular_values(u * mask[:, None, :], jnp.swapaxes(v, -1, -2) * mask[:, None, :])


@jax.jit
def _activate(u, v, old, new, key, eps):
    cols = jnp.arange(u.shape[-1])
    fresh = (cols >= old[:, None]) & (cols < new[:, None])  # (layers, R)
    ku, kv = jax.random.split(key)
    ru = eps * jax.random.normal(ku, u.shape, F32) / jnp.sqrt(F32(u.shape[1]))
    rv = eps * jax.random.normal(kv, v.shape, F32) / jnp.sqrt(F32(v.shape[2]))
    return jnp.where(fresh[:, None, :], ru, u), jnp.where(fresh[:, :, None], rv, v)


def update_ranks(model, key, *, config: InRankConfig = InRankConfig()):
    """Algorithm 2, lines 6–8 for every MLP matrix: grow the ranks, start the new modes at small random values.

    Returns ``(model, info)`` with ``info[name] = {"rank": [...], "explained_ratio": [...]}`` per layer
    (the ratio at the new rank).
    """
    info = {}
    for i, name in enumerate(_MLP):
        lin = _get(model, name)
        s = to_host(_layer_spectrum(lin.u, lin.v, lin.n_active))
        old = np.asarray(lin.n_active) - lin.buffer
        new = np.array(
            [grow_rank(s[l], int(old[l]), buffer=lin.buffer, threshold=config.threshold) for l in range(len(old))]
        )
        info[name] = {
            "rank": new.tolist(),
            "explained_ratio": [explained_ratio(s[l], int(new[l]), lin.buffer) for l in range(len(new))],
        }
        if np.any(new != old):
            n_active = jnp.asarray(new + lin.buffer, jnp.int32)
            u, v = _activate(lin.u, lin.v, lin.n_active, n_active, jax.random.fold_in(key, i), F32(config.eps))
            model = _replace(model, name, dataclasses.replace(lin, u=u, v=v, n_active=n_active))
    return model, info


def to_low_rank(model, *, ranks: dict | None = None):
    """Algorithm 3, lines 4–6: replace each ``W_0 + U V`` by its best rank-``r`` factorisation ``U* V*``.

    ``r`` is the layer's InRank rank (buffer discarded) unless ``ranks[name]`` (one int per layer) says
    otherwise. Exact when ``rank(W_0 + U V) ≤ r``; otherwise the Eckart–Young truncation.
    """
    for name in _MLP:
        lin = _get(model, name)
        mask = (jnp.arange(lin.u.shape[-1]) < lin.n_active[:, None]).astype(F32)
        w = lin.w0 + (lin.u * mask[:, None, :]) @ lin.v
        r = np.asarray(lin.n_active) - lin.buffer if ranks is None else np.asarray(ranks[name])
        n_layers, d_in, d_out = w.shape
        if r.shape != (n_layers,) or r.min() < 1 or r.max() > min(d_in, d_out):
            raise ValueError(f"{name}: need one rank in [1, {min(d_in, d_out)}] per layer, got {r}")
        width = int(r.max())
        a, s, ct = jnp.linalg.svd(w, full_matrices=False)
        keep = (jnp.arange(width) < jnp.asarray(r)[:, None]).astype(F32)
        root = jnp.sqrt(s[:, :width]) * keep
        layer = LowRankLinear(
            u=a[:, :, :width] * root[:, None, :],
            v=root[:, :, None] * ct[:, :width, :],
            bias=lin.bias,
            rank=jnp.asarray(r, jnp.int32),
        )
        model = _replace(model, name, layer)
    return model


def mlp_ranks(model) -> dict:
    """Rank per layer of each MLP matrix: InRank's ``r``, the fixed rank, or ``min(d_in, d_out)`` (full)."""
    out = {}
    for name in _MLP:
        lin = _get(model, name)
        if isinstance(lin, InRankLinear):
            out[name] = (np.asarray(lin.n_active) - lin.buffer).tolist()
        elif isinstance(lin, LowRankLinear):
            out[name] = np.asarray(lin.rank).tolist()
        else:
            out[name] = [min(lin.weight.shape[1:])] * lin.weight.shape[0]
    return out


def parameter_count(model) -> dict:
    """``{"trainable", "frozen", "allocated"}``: trainable parameters counting only the active modes of the
    MLP factors, frozen ``W_0`` entries, and all stored floating-point entries."""
    allocated = sum(a.size for a in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array)))
    trainable, frozen = allocated, 0
    for name in _MLP:
        lin = _get(model, name)
        if isinstance(lin, (InRankLinear, LowRankLinear)):
            d_in, d_out = lin.u.shape[1], lin.v.shape[2]
            active = np.asarray(lin.n_active if isinstance(lin, InRankLinear) else lin.rank).sum()
            trainable -= lin.u.size + lin.v.size - int(active) * (d_in + d_out)
        if isinstance(lin, InRankLinear):
            frozen += lin.w0.size
            trainable -= lin.w0.size
    return {"trainable": int(trainable), "frozen": int(frozen), "allocated": int(allocated)}


def phase(model) -> str:
    """``"inrank"`` (MLP matrices ``W_0 + U V``), ``"fixed-rank"`` (``U* V*``) or ``"full"`` (dense)."""
    lin = _get(model, _MLP[0])
    return "inrank" if isinstance(lin, InRankLinear) else "fixed-rank" if isinstance(lin, LowRankLinear) else "full"


def trainable(model):
    """Filter spec of the trained arrays: the floating-point arrays, except the frozen ``W_0`` of InRank layers."""
    spec = jax.tree_util.tree_map(eqx.is_inexact_array, model)
    for name in _MLP:
        if isinstance(_get(model, name), InRankLinear):
            spec = eqx.tree_at(lambda m: getattr(m.blocks.mlp, name).w0, spec, False)
    return spec
