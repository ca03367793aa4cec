"""The sleeping directions of the greedy low-rank limit: their log scales, signed speeds and orientation
(docs/math.md, *Full weights: the greedy low-rank limit*, (b) and (c)).

On a plateau at the saddle ``W̄`` the sleeping directions of a factor have log scales ``e ∈ [0, 1]`` (its singular
values are ``σ ≈ α^{2e}``) that fall at the singular values ``σ_i`` of ``G = −∇_W L``, sorted exponent with sorted
speed. The conservation law makes a square factor of full width carry an orientation ``sign det W``; where it
differs from the orientation the plateau grows, ``sign det(W̄ + G)``, the last sleeping direction shrinks at
``σ_s`` instead and turns back at the scale of the start, ``e = 1``.
"""

from __future__ import annotations

import numpy as np


def fold(x):
    """``min(x, 2 − x)``: a direction that shrinks back to the scale of the start (e = 1) grows again."""
    return 1.0 - np.abs(1.0 - x)


def saddle_orientation(w, g, speeds) -> int:
    """``sign det(W̄ + G)`` for a square factor of full width whose G has the nonzero singular values ``speeds``
    on its sleeping directions, else 0: ``W̄ + G = [P, A] diag(S, Σ) [Q, B]ᵀ`` (G vanishes on the learned
    directions), so this is ``det O_+`` for the orthogonal ``O_+: p_i ↦ q_i, a_i ↦ b_i`` whose graph holds the
    learned columns and the growing directions ``(a_i, b_i)`` of ``A``."""
    if not (speeds.size and np.all(speeds > 0)):
        return 0
    return int(np.linalg.slogdet(w + g)[0])


def signed_rates(exponents, speeds, orientation: int, saddle: int, lost: int) -> np.ndarray:
    """Signed speeds of the ascending ``exponents`` on a plateau whose G has the singular values ``speeds``
    (``σ_1 ≥ … ≥ σ_s``): ``σ_1, σ_2, …`` in order, but the shrinking directions take ``−σ_s, −σ_{s−1}, …``: the
    ``lost`` leading ones (they left the rank in phase (B)), else the last one where the orientation carried in
    differs from the saddle's."""
    s = exponents.size
    if lost:
        shrinking = np.arange(lost)
    else:
        shrinking = np.arange(s - 1, s) if orientation * saddle < 0 else np.arange(0)
    growing = np.setdiff1d(np.arange(s), shrinking)
    rates = np.empty(s)
    rates[growing] = speeds[: growing.size]
    rates[shrinking] = -speeds[::-1][: shrinking.size]
    return rates


def escape_times(exponents, rates) -> np.ndarray:
    """Time until each exponent reaches 0: ``e/r`` growing, ``(2 − e)/|r|`` shrinking (it turns back at 1), ∞
    at rest."""
    safe = np.where(rates == 0, 1.0, np.abs(rates))
    return np.where(rates > 0, exponents / safe, np.where(rates < 0, (2.0 - exponents) / safe, np.inf))


def move(exponents, rates, step: float, orientation: int, saddle: int) -> tuple[np.ndarray, int]:
    """The exponents after ``step`` on the plateau, folded at 1, and the orientation ``sign det W`` at its end:
    once every exponent is below 1 it is the saddle's, flipped by a direction still shrinking; where the saddle
    has none, the one carried in, flipped by every direction that turned at 1 (a singular value of W passed
    through 0)."""
    x = exponents - step * rates
    folded = fold(x)
    if saddle and np.all(folded < 1.0):
        return folded, saddle * (-1) ** int(np.sum((rates < 0) & (x < 1.0)))
    return folded, orientation * (-1) ** int(np.sum(x > 1.0))
