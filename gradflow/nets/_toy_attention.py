"""The paper's toy with full weights (§5, Figure 2 d–f): one attention head, GD from small init.

Student and teacher are attention heads (no 1/√d, the convention of the diagonal model, docs/math.md "Models with diagonal weights")::

    h(X) = softmax(X W_K W_Qᵀ Xᵀ) X W_V W_Oᵀ,      X ∈ R^{T×d},  W_• ∈ R^{d×d_head}

with the softmax over each row. Data: n samples of T tokens with i.i.d. N(0, 1) entries; targets
are the teacher's outputs. The teacher's products ``W_K W_Qᵀ = A diag(σ_KQ) Bᵀ`` and
``W_V W_Oᵀ = C diag(σ_VO) Dᵀ`` (A, B, C, D with orthonormal random columns) have low rank and
distinct singular values, so that the student's stages are visible. The loss is the square
loss ``(1/n) Σ_j ½‖y_j − h(X_j)‖²``; the student starts at ``α·N(0, 1)`` entries and runs full-batch
GD with step ``lr``. Time is ``t = lr · step`` and rescaled time ``τ = t / log(1/α)``.

Everything runs in float32 with explicit dtypes; the spectra use the QR trick of
:func:`gradflow.nets._spectra.product_singular_values`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _loop
from ._configs import TrainConfig, check_init_scale
from ._distributed import Layout, make_layout
from ._runs import describe
from ._spectra import product_singular_values

__all__ = [
    "ToyAttentionConfig",
    "ToyAttentionResult",
    "AttentionHead",
    "toy_attention_data",
    "train_toy_attention",
    "plot_toy_attention",
]

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class ToyAttentionConfig:
    """The teacher–student task. Defaults: the paper's n = 1000, T = 10, d = 50, d_head = d."""

    n: int = 1000
    tokens: int = 10
    dim: int = 50
    d_head: int | None = None
    teacher_kq: tuple[float, ...] = (1.0, 0.6, 0.3)
    teacher_vo: tuple[float, ...] = (1.0, 0.6, 0.3)

    def __post_init__(self):
        dh = self.head_dim
        if min(self.n, self.tokens, self.dim, dh) < 1:
            raise ValueError(f"n, tokens, dim and d_head must be positive, got {self}")
        for name, sv in (("teacher_kq", self.teacher_kq), ("teacher_vo", self.teacher_vo)):
            if not 1 <= len(sv) <= dh or min(sv) <= 0:
                raise ValueError(f"{name} needs 1..d_head={dh} positive singular values, got {sv}")

    @property
    def head_dim(self) -> int:
        return self.dim if self.d_head is None else self.d_head


class AttentionHead(eqx.Module):
    """One attention head with full weights ``wq, wk, wv, wo`` of shape (d, d_head)."""

    wq: jax.Array
    wk: jax.Array
    wv: jax.Array
    wo: jax.Array

    def __call__(self, x: jax.Array) -> jax.Array:
        """``softmax(X W_K W_Qᵀ Xᵀ) X W_V W_Oᵀ`` for one sample ``x`` (T, d)."""
        scores = (x @ self.wk) @ (x @ self.wq).T
        return jax.nn.softmax(scores, axis=-1) @ ((x @ self.wv) @ self.wo.T)


class ToyAttentionResult(eqx.Module):
    """Records of a run: at ``step[k]``, the loss and the singular values (descending, d_head of
    them) of ``W_K W_Qᵀ`` and ``W_V W_Oᵀ``; ``time = lr·step``, ``rescaled_time = time / log(1/α)``."""

    step: np.ndarray
    time: np.ndarray
    rescaled_time: np.ndarray
    loss: np.ndarray
    sv_kq: np.ndarray
    sv_vo: np.ndarray
    init_scale: float = eqx.field(static=True)
    lr: float = eqx.field(static=True)
    teacher_kq: tuple = eqx.field(static=True)
    teacher_vo: tuple = eqx.field(static=True)


_RECORDED = ("step", "time", "rescaled_time", "loss", "sv_kq", "sv_vo")
"""The array fields of ``ToyAttentionResult``: one entry per record."""


def _orthonormal(key, d: int, r: int) -> jax.Array:
    q, _ = jnp.linalg.qr(jax.random.normal(key, (d, r), F32))
    return q


def toy_attention_data(config: ToyAttentionConfig, *, seed: int) -> tuple[jax.Array, jax.Array, AttentionHead]:
    """``(X, Y, teacher)``: X (n, T, d) N(0, 1) float32, Y = teacher(X)."""
    c = config
    dh = c.head_dim
    kx, ka, kb, kc, kd = jax.random.split(jax.random.PRNGKey(seed), 5)

    def factor(key, sv):
        s = jnp.zeros((dh,), F32).at[: len(sv)].set(jnp.sqrt(jnp.asarray(sv, F32)))
        return _orthonormal(key, c.dim, dh) * s

    teacher = AttentionHead(
        wq=factor(kb, c.teacher_kq),
        wk=factor(ka, c.teacher_kq),
        wv=factor(kc, c.teacher_vo),
        wo=factor(kd, c.teacher_vo),
    )
    x = jax.random.normal(kx, (c.n, c.tokens, c.dim), F32)
    return x, jax.vmap(teacher)(x), teacher


def _init_student(config: ToyAttentionConfig, init_scale: float, seed: int) -> AttentionHead:
    ks = jax.random.split(jax.random.PRNGKey(seed + 1), 4)
    shape = (config.dim, config.head_dim)
    w = [F32(init_scale) * jax.random.normal(k, shape, F32) for k in ks]
    return AttentionHead(*w)


def _loss(head: AttentionHead, x, y) -> jax.Array:
    return 0.5 * jnp.mean(jnp.sum(jnp.square(jax.vmap(head)(x) - y), axis=(1, 2)))


def _batch_loss(head: AttentionHead, arrays, idx) -> jax.Array:
    """The loss of the samples ``idx`` (all of them: full-batch GD)."""
    x, y = arrays
    return _loss(head, x[idx], y[idx])


@eqx.filter_jit
def _measure(head, x, y):
    return (_loss(head, x, y), product_singular_values(head.wk, head.wq), product_singular_values(head.wv, head.wo))


def _record(head, arrays, layout: Layout, step: int, *, lr: float, log_inv: float) -> dict:
    """The record after ``step`` GD steps: times, loss and the singular values of both products."""
    loss, kq, vo = _measure(head, *arrays)
    return {
        "time": lr * step,
        "rescaled_time": lr * step / log_inv,
        "loss": float(loss),
        "sv_kq": np.asarray(kq).tolist(),
        "sv_vo": np.asarray(vo).tolist(),
    }


def train_toy_attention(
    config: ToyAttentionConfig = ToyAttentionConfig(),
    *,
    init_scale: float,
    steps: int,
    lr: float,
    seed: int = 0,
    record_every: int = 10,
    out: str | pathlib.Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
) -> ToyAttentionResult:
    """Full-batch GD on the toy task from ``init_scale``·N(0, 1) weights for ``steps`` steps, through the training
    loop of the networks (``_loop.run``: recipe ``optimizer="sgd"``, constant learning rate, one device).

    Records at step 0, at the multiples of ``record_every`` and at the last step. With ``out``, each record is
    appended to ``out/metrics.jsonl`` as it is made and the weights are checkpointed in ``out/checkpoint`` at each
    record; ``resume=True`` continues from that checkpoint, bit for bit as the uninterrupted run (``steps`` may
    grow: the learning rate is constant), and refuses one written with other settings; without it, an ``out``
    holding an earlier run is refused unless ``overwrite=True``. Ctrl-C stops after the step in flight, with a
    checkpoint there (``_stop.RunInterrupted``). The result is also saved as ``out/result.npz``. Raises
    ``NonFiniteLossError`` (a ``FloatingPointError``) at the first step whose loss is not finite.
    """
    check_init_scale(init_scale, below_one=True)
    if steps < 1 or record_every < 1 or lr <= 0:
        raise ValueError(f"need steps >= 1, record_every >= 1, lr > 0; got {steps}, {record_every}, {lr}")
    x, y, _ = toy_attention_data(config, seed=seed)
    recipe = TrainConfig(
        optimizer="sgd",
        schedule="constant",
        lr=lr,
        total=steps,
        warmup=0,
        unit="steps",
        batch_size=config.n,
        eval_every=record_every,
        checkpoint_every=record_every,
        log_every=None,
        n_spectra=0,
    )
    if overwrite and out is not None:
        (pathlib.Path(out) / "result.npz").unlink(missing_ok=True)  # the earlier run's; this one writes its own
    full = np.arange(config.n, dtype=np.int32)[None]
    task = _loop.Task(
        loss=_batch_loss,
        arrays=(x, y),
        n_train=config.n,
        batch=lambda step: full,
        eval_arrays=(x, y),
        evaluate=functools.partial(_record, lr=lr, log_inv=math.log(1.0 / init_scale)),
    )
    run = _loop.run(
        _init_student(config, init_scale, seed),
        recipe,
        task,
        layout=make_layout(1),
        description=describe(init_scale=init_scale, lr=lr, seed=seed, record_every=record_every, config=config),
        out=out,
        resume=resume,
        overwrite=overwrite,
        evaluate_at_start=True,
    )
    arrays = {k: np.array([r[k] for r in run.metrics]) for k in _RECORDED}
    if out is not None:
        np.savez(pathlib.Path(out) / "result.npz", **arrays, init_scale=init_scale, lr=lr)
    teachers = dict(teacher_kq=tuple(config.teacher_kq), teacher_vo=tuple(config.teacher_vo))
    return ToyAttentionResult(**arrays, init_scale=init_scale, lr=lr, **teachers)


def plot_toy_attention(results: list[ToyAttentionResult], path) -> None:
    """Figure 2 d–f: singular values of ``W_V W_Oᵀ`` (d), of ``W_K W_Qᵀ`` (e) and the loss (f)
    against rescaled time, one row per initialisation scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 3, figsize=(12, 3.2 * len(results)), squeeze=False)
    for row, r in zip(axes, results):
        for ax, sv, teacher, title in (
            (row[0], r.sv_vo, r.teacher_vo, r"singular values of $W_V W_O^\top$"),
            (row[1], r.sv_kq, r.teacher_kq, r"singular values of $W_K W_Q^\top$"),
        ):
            ax.plot(r.rescaled_time, sv[:, : max(len(teacher) + 2, 1)])
            for s in teacher:
                ax.axhline(s, color="grey", lw=0.5, ls=":")
            ax.set_title(f"{title}, α={r.init_scale:g}")
        row[2].semilogy(r.rescaled_time, r.loss)
        row[2].set_title(f"loss, α={r.init_scale:g}")
        for ax in row:
            ax.set_xlabel(r"rescaled time $t/\log(1/\alpha)$")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
