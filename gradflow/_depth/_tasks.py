"""The built-in tasks of depth-L diagonal networks (docs/depth.md, *Built-in tasks*): linear regression with a sparse
teacher, ``h(x; β) = ⟨β, x⟩`` with ``β = w_1 ⊙ ⋯ ⊙ w_L``, and Saxe et al.'s whitened modes, ``L(β) = ½ ‖β − s‖²``."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from .._kit._checks import check_int
from .._kit._task import Task, check_seed, sparse_gaussian
from ._model import DepthModel

DEFAULT_DEPTH = 3
"""The depth of the built-in tasks unless given."""

SAXE_STRENGTHS = (3.0, 2.0, 1.0)
"""The default strengths ``s`` of ``saxe_modes``: stage times ``1/((L−2) s) = 1/3, 1/2, 1`` in the limit (L = 3)."""


def _linear_h(x, beta):
    return jnp.dot(x, beta)


def depth_linear_model(X, Y, *, depth: int) -> DepthModel:
    """The model ``h(x; β) = ⟨β, x⟩``, ``β = w_1 ⊙ ⋯ ⊙ w_L``, with the square loss on ``X ∈ R^{n×p}``, ``Y ∈ R^n``."""
    X, Y = np.asarray(X), np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 1:
        raise ValueError(
            f"depth-L linear regression needs X of shape (n, p) and Y of shape (n,); got {X.shape}, {Y.shape}."
        )
    return DepthModel(_linear_h, X, Y, p=X.shape[1], depth=depth, loss="square")


def _orthonormal_design(rng: np.random.Generator, n: int, p: int) -> np.ndarray:
    """``X ∈ R^{n×p}`` with ``XᵀX / n = I`` (a random rotation of the first ``p`` axes)."""
    if n < p:
        raise ValueError(f"an orthonormal design needs n >= p; got n={n}, p={p}.")
    q, _ = np.linalg.qr(rng.standard_normal((n, p)))
    return np.sqrt(n) * q


def depth_linear(
    *,
    n: int = 100,
    p: int = 10,
    depth: int = DEFAULT_DEPTH,
    nonzero: int | None = 3,
    beta_star=None,
    orthonormal: bool = False,
    noise: float = 0.0,
    seed: int = 0,
) -> Task:
    """Seeded depth-L diagonal linear regression ``y = ⟨β*, x⟩ + noise``, learned by ``β = w_1 ⊙ ⋯ ⊙ w_L``.

    As ``gradflow.models.diagonal_linear``: ``X`` has i.i.d. N(0, 1) entries (or ``XᵀX / n = I`` with
    ``orthonormal=True``), ``β*`` has ``nonzero`` N(0, 1) entries on a random support (dense if None). The layers'
    directions ``u0`` (shape ``(L, p)``, ``w_l(0) = α u0[l]``) are i.i.d. N(0, 1): an unbalanced start.
    """
    n, p, seed = check_int(n, "n"), check_int(p, "p"), check_seed(seed)
    depth = check_int(depth, "depth")
    rng = np.random.default_rng([seed, 0])
    X = _orthonormal_design(rng, n, p) if orthonormal else rng.standard_normal((n, p))
    if beta_star is None:
        beta_star = sparse_gaussian(rng, p, nonzero, "nonzero")
    beta_star = np.asarray(beta_star, dtype=np.float64)
    if beta_star.shape != (p,):
        raise ValueError(f"beta_star must have shape ({p},); got {beta_star.shape}.")
    Y = X @ beta_star + noise * rng.standard_normal(n)
    model = depth_linear_model(X, Y, depth=depth)
    W0 = np.random.default_rng([seed, 1]).standard_normal((depth, p))
    config = dict(n=n, p=p, depth=depth, nonzero=nonzero, orthonormal=orthonormal, noise=noise, seed=seed)
    return Task("depth_linear", model, W0, None, beta_star, config)


def saxe_modes(
    *, n: int | None = None, depth: int = DEFAULT_DEPTH, singular_values=SAXE_STRENGTHS, seed: int = 0
) -> Task:
    """Saxe et al.'s whitened modes: ``y = ⟨s, x⟩`` on the design ``X = √n [I_p; 0]`` (``XᵀX / n = I``), so that
    ``L(β) = ½ ‖β − s‖²`` and every coordinate is one mode of strength ``s_k`` (the singular values of the
    input-output correlation), learned from the balanced, aligned start ``u0 = 1`` (shape ``(L, p)``).

    Each mode follows ``dσ/dt = L σ^{2−2/L}(s − σ)`` (``theory.saxe_time``): in ``τ = t α^{L−2}`` its stage time tends to
    ``1/((L−2) s)`` for ``L ≥ 3`` (``1/s`` in ``τ = t / log(1/α)`` at ``L = 2``). ``n`` samples (default ``p``, the
    number of strengths). The design is exact, so ``g = s − β`` has no rounding (a rotated design's, amplified by
    ``α^{−(L−2)}`` on the plateaus, stalled the flow at ``α^{L−2} = 1e-8``); ``seed`` is taken for the command line's
    sake and changes nothing.
    """
    s = np.asarray(singular_values, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError(f"singular_values must be a non-empty list of positive numbers; got {singular_values!r}.")
    p, seed = s.size, check_seed(seed)
    n = p if n is None else check_int(n, "n")
    if n < p:
        raise ValueError(f"whitened modes need n >= p samples; got n={n}, p={p}.")
    depth = check_int(depth, "depth")
    X = np.sqrt(n) * np.eye(n, p)
    model = depth_linear_model(X, np.sqrt(n) * np.concatenate([s, np.zeros(n - p)]), depth=depth)
    config = dict(n=n, depth=depth, singular_values=tuple(float(x) for x in s), seed=seed)
    return Task("saxe_modes", model, np.ones((depth, p)), None, s, config)


@dataclasses.dataclass(frozen=True)
class SaxeStaircase:
    """The greedy limit of ``saxe_modes`` at ``L = 2`` in closed form, with the fields a depth comparison reads.

    From the balanced start ``u0 = 1`` mode ``i`` grows as ``β_i ≈ α² e^{2 s_i t}`` until it is learned, at
    ``τ = t / log(1/α) → 1/s_i``: stage ``k`` holds the ``k`` strongest modes at ``s``. (``greedy_limit`` leaves
    ``L = 2`` to the diagonal family, whose Algorithm 1 needs ``|u0_i| ≠ |v0_i|``.) At ``L = 2`` the clocks
    ``c = (α/a)^{L−2}`` are 1 until a coordinate wakes: ``b_at`` holds them there.
    """

    times: np.ndarray
    beta: np.ndarray
    loss: np.ndarray
    support: np.ndarray
    activated: np.ndarray

    @classmethod
    def of(cls, s) -> SaxeStaircase:
        s = np.asarray(s, dtype=np.float64)
        order = np.argsort(-s, kind="stable")
        support = np.zeros((s.size + 1, s.size), bool)
        for k in range(1, s.size + 1):
            support[k, order[:k]] = True
        beta = np.where(support, s, 0.0)
        loss = 0.5 * np.sum(np.where(support, 0.0, s**2), axis=1)
        return cls(np.concatenate([[0.0], 1.0 / s[order]]), beta, loss, support, order)

    @property
    def b(self) -> np.ndarray:
        return np.where(self.support, 0.0, 1.0)

    def stage_at(self, tau) -> np.ndarray:
        return np.searchsorted(self.times, np.asarray(tau), side="right") - 1

    def b_at(self, tau) -> np.ndarray:
        return self.b[self.stage_at(tau)]
