"""The pieces of Algorithm 1 that are checks rather than dynamics (paper Assumptions 4.2–4.4; docs/math.md,
*The assumptions, and how gradflow checks them*).

Everything here is cheap NumPy on stage-level quantities, plus the restricted Hessian of
Assumption 4.3, which is a small JAX computation in the support coordinates.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class AssumptionWarning(UserWarning):
    """An assumption of the paper's Theorem 4.5 (4.2, 4.3 or 4.4) failed a numerical check."""


def time_until_active(b: np.ndarray, g: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Paper eq. (8): ``Δ(i) = (b_i − 1 + sgn g_i) / g_i`` for candidates with ``g_i ≠ 0``, else ``∞``.

    ``g`` must already have its numerically-zero entries set to exactly 0.
    """
    active = candidate & (g != 0)
    safe = np.where(active, g, 1.0)
    return np.where(active, (b - 1.0 + np.sign(g)) / safe, np.inf)


class Choice(eqx.Module):
    """The winner of paper eq. (9) and the runner-up that Assumption 4.2 compares it with."""

    coordinate: int
    runner_up: int
    gap: float
    tied: np.ndarray


def choose_coordinate(delta: np.ndarray, tie_tol: float) -> Choice:
    """``i_k = argmin Δ`` (eq. 9) with a deterministic tie-break.

    Coordinates whose ``Δ`` lies within ``tie_tol`` of the minimum are *tied*; the winner is the
    lowest index among them, so the choice does not depend on rounding. The runner-up is the best
    coordinate other than the winner (``-1`` and gap ``∞`` if there is none).
    """
    best = float(np.min(delta))
    tied = np.flatnonzero(delta <= best + tie_tol)
    winner = int(tied[0])
    rest = np.where(np.arange(delta.size) == winner, np.inf, delta)
    runner_up = int(np.argmin(rest))
    gap = float(rest[runner_up] - delta[winner])
    if not np.isfinite(rest[runner_up]):
        runner_up, gap = -1, float("inf")
    return Choice(winner, runner_up, gap, tied[1:])


def reduced_g(model, index, mask) -> Callable:
    """``β_S ↦ g_S``: g on the support coordinates ``index`` (slots outside ``mask`` count as ``β = 0``)."""

    def g(beta):
        return model.g(jnp.zeros(model.p, dtype=beta.dtype).at[index].add(jnp.where(mask, beta, 0.0)))[index]

    return g


@eqx.filter_jit
def restricted_hessian(model, index, mask, signs, y) -> jax.Array:
    """Hessian of ``ũ ↦ L(ũ, s ⊙ ũ)`` in the support coordinates (Assumption 4.3), padded rows zero.

    With ``β = s ⊙ ũ²`` and ``g = −∇_β L``, it is ``−4 D (∂g/∂β) D − 2 diag(s ⊙ g)``, ``D = diag(s ⊙ ũ)``:
    ``∂g/∂β`` is built one column (one JVP of the model's g) per slot of the support and in sequence. ``mask``
    is a prefix of the padded state, so the padded slots cost nothing (one compilation serves every support
    size); batching the columns would make the model's small matrix products batched ones, which are slower on
    CPU.
    """
    g, jvp = jax.linearize(reduced_g(model, index, mask), jnp.where(mask, signs * y * y, 0.0))
    d = jnp.where(mask, signs * y, 0.0)

    def column(j, cols):
        return cols.at[:, j].set(-4 * d * jvp(jax.nn.one_hot(j, y.size, dtype=y.dtype)) * d[j])

    cols = jax.lax.fori_loop(0, jnp.sum(mask), column, jnp.zeros((y.size, y.size), dtype=y.dtype))
    return cols - 2 * jnp.diag(jnp.where(mask, signs * g, 0.0))


def hessian_min_eig(hessian: np.ndarray, mask: np.ndarray) -> float:
    """Smallest eigenvalue on the support block; ``+∞`` for an empty support (vacuously positive-definite)."""
    block = hessian[np.ix_(mask, mask)]
    if block.size == 0:
        return float("inf")
    return float(np.linalg.eigvalsh(0.5 * (block + block.T))[0])


def perturbed_starts(
    start: np.ndarray, mask: np.ndarray, count: int, size: float, rng: np.random.Generator
) -> np.ndarray:
    """``count`` random multiplicative perturbations ``y ⊙ (1 + size·z)`` of phase (B)'s start (Assumption 4.4).

    ``z`` is standard normal clipped to ``[−3, 3]`` (so for ``size < 1/3`` every perturbed start keeps the
    support and the signs of ``start``: it lies in the set ``B(u^k, δ) ∩ R^p_{≥0}`` of Assumption 4.4).
    """
    z = np.clip(rng.standard_normal((count, start.size)), -3.0, 3.0)
    return np.where(mask, start * (1.0 + size * z), 0.0)
