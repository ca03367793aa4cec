"""The Hessian of the loss in the factor entries, touched only through products ``H v``, and the factorisation's gauge
``(U X, −V Xᵀ)`` (docs/math.md, *Full weights: the greedy low-rank limit*): the orthogonal projection off it in
closed form, and the smallest eigenvalue of ``H`` off it (Assumption 4.3) by the Lanczos method."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ._layout import layout_loss

QUICK_COMPILE = dict(xla_backend_optimization_level=0, xla_llvm_disable_expensive_passes=True)
"""XLA's cheaper code generation, where compilation dominates (phase (B) of small models, the products of the
eigenvalue check): code compiles in about half the time and runs 1.5–2 times slower (benchmarks/bench_rank_greedy.py:
it pays on the d = 6 head, not the d = 20 one)."""
QUICK_SIZE = 512
"""Factor entries up to which phase (B) and the eigenvalue check's products are compiled with ``QUICK_COMPILE``."""


def jit_by_size(fn):
    """``fn`` compiled two ways; the returned ``compiled(layout)`` picks ``QUICK_COMPILE`` for at most
    ``QUICK_SIZE`` factor entries, XLA's full optimisation above (at the paper's size, 10,000 entries, the eigenvalue
    check's products take 1.5 times as long compiled quickly)."""
    quick, fast = eqx.filter_jit(fn, compiler_options=QUICK_COMPILE), eqx.filter_jit(fn)
    return lambda layout: quick if layout.size <= QUICK_SIZE else fast


def hessian_product(model, layout, y, v):
    """``H v``, the Hessian of L in the factor entries at ``y`` times ``v`` (forward over reverse)."""
    return jax.jvp(jax.grad(lambda z: layout_loss(model, layout, z)), (y,), (v,))[1]


def gauge_blocks(layout, y):
    """Per factor, what :func:`project_off_gauge` needs at ``y``: ``U``, ``V``, the eigenvectors of ``UᵀU`` and
    ``VᵀV``, and the inverses of the sums of their eigenvalues (0 for pairs of zero columns, which have no gauge)."""
    blocks = []
    for u, v in layout.split(y):
        (du, qu), (dv, qv) = jnp.linalg.eigh(u.T @ u), jnp.linalg.eigh(v.T @ v)
        denominator = du[:, None] + dv[None, :]
        keep = denominator > 1e-12 * jnp.max(denominator)
        blocks.append((u, v, qu, qv, jnp.where(keep, 1 / jnp.where(keep, denominator, 1.0), 0.0)))
    return tuple(blocks)


def project_off_gauge(layout, blocks, x):
    """The orthogonal projection of the flat vector x off the gauge directions ``(U X, −V Xᵀ)`` of the factors of
    :func:`gauge_blocks`: the gauge component of ``(dU, dV)`` is ``(U X, −V Xᵀ)`` with X solving the normal
    equations ``UᵀU X + X VᵀV = Uᵀ dU − dVᵀ V``, a Sylvester equation, diagonal in the eigenbases of ``UᵀU`` and
    ``VᵀV``."""
    out = []
    for (du, dv), (u, v, qu, qv, inverse) in zip(layout.split(x), blocks):
        X = qu @ ((qu.T @ (u.T @ du - dv.T @ v) @ qv) * inverse) @ qv.T
        out += [(du - u @ X).ravel(), (dv + v @ X.T).ravel()]
    return jnp.concatenate(out)


def _off_gauge_hessian_product(model, layout, blocks, y, v):
    return project_off_gauge(layout, blocks, hessian_product(model, layout, y, project_off_gauge(layout, blocks, v)))


_compiled_product = jit_by_size(_off_gauge_hessian_product)


def off_gauge_hessian_product(model, layout, blocks, y, v):
    """``P H P v``, with ``P`` the projection off the gauge of :func:`project_off_gauge` (compiled by
    :func:`jit_by_size`)."""
    return _compiled_product(layout)(model, layout, blocks, y, v)


def min_eig_off_gauge(model, layout, y, ranks, seed: int = 0, rtol: float = 1e-8) -> float:
    """The smallest eigenvalue of the Hessian of L in the active factor entries (the first ``ranks[j]`` columns of
    every factor) at ``y``, off the gauge ``(U X, −V Xᵀ)``: the Lanczos method on ``P H P``
    (:func:`off_gauge_hessian_product`) from a random vector off the gauge, fully reorthogonalised, so that the gauge
    never enters. It stops when the smallest Ritz value's residual ``β_m |s_m|`` is below ``rtol`` times the
    largest Ritz value in magnitude (the eigenvalue's error is about the residual squared over the gap to the
    next), or when the space is invariant (at most the dimension off the gauge).

    Every new Lanczos vector is projected off the gauge again: ``P H P`` is zero on the gauge, and rounding there,
    left to grow, makes one of its zeros the smallest Ritz value (at the paper-size head, ``1e-16`` where the
    smallest eigenvalue off the gauge is 0.34)."""
    active = np.flatnonzero(layout.mask(ranks))
    y = jnp.asarray(y)
    blocks = gauge_blocks(layout, y)

    def padded(x):
        full = np.zeros(layout.size)
        full[active] = x
        return jnp.asarray(full)

    def off_gauge(x):
        return np.asarray(project_off_gauge(layout, blocks, padded(x)))[active]

    q = off_gauge(np.random.default_rng(seed).standard_normal(active.size))
    basis, alpha, beta = [q / np.linalg.norm(q)], [], []
    while True:
        w = np.asarray(off_gauge_hessian_product(model, layout, blocks, y, padded(basis[-1])))[active]
        alpha.append(basis[-1] @ w)
        for _ in range(2):  # full reorthogonalisation, twice is enough
            w = off_gauge(w - np.stack(basis).T @ (np.stack(basis) @ w))
        beta.append(np.linalg.norm(w))
        theta, vectors = scipy.linalg.eigh_tridiagonal(np.array(alpha), np.array(beta[:-1]))
        size = np.max(np.abs(theta))
        if beta[-1] * abs(vectors[-1, 0]) <= rtol * size or beta[-1] <= 1e-12 * size or len(basis) == active.size:
            return float(theta[0])
        basis.append(w / beta[-1])
