"""The sign frame of the log-coordinate flow (paper appendix C.3; docs/math.md, *Small initialisation and the
conservation law*).

Flipping the signs of both ``u_i`` and ``v_i``, or swapping them, changes neither ``β_i = u_i v_i`` nor the
flow. Per coordinate, a frame ``(swap, sign)`` maps the weights to the normalised weights

    u_n, v_n = sign · (v if swap else u),   sign · (u if swap else v),

and is chosen so that ``u_n > |v_n|``: then ``w = u_n + v_n`` and ``w̄ = u_n − v_n`` are positive, with
``w w̄ = u² − v²`` conserved. The map is an involution, so :func:`apply_frame` also maps normalised weights
back. Flow, gradient descent and the greedy limit all use this one frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._config import float64


def frame_of(u, v) -> tuple[np.ndarray, np.ndarray]:
    """The frame ``(swap, sign)`` that makes ``u_n > |v_n|``; needs ``|u_i| ≠ |v_i|`` (see ``check_init``)."""
    swap = np.abs(u) < np.abs(v)
    return swap, np.sign(np.where(swap, v, u))


def apply_frame(a, b, swap, sign) -> tuple[np.ndarray, np.ndarray]:
    """``(sign · (b if swap else a), sign · (a if swap else b))``: into the frame ``(swap, sign)`` and back."""
    return sign * np.where(swap, b, a), sign * np.where(swap, a, b)


@float64
def weights(log_w, log_wbar, swap, sign) -> tuple[np.ndarray, np.ndarray]:
    """The weights ``(u, v)`` of the exact state ``(log w, log w̄)`` in the frame ``(swap, sign)``.

    ``u_n, v_n = (w + w̄)/2, (w − w̄)/2``, 0 where below the float64 range. The exponentials are JAX's,
    the same as the solver's, so that ``u ⊙ v`` is bit for bit the β whose loss the solver recorded.
    """
    w, wbar = (np.asarray(x) for x in _exp(jnp.asarray(log_w), jnp.asarray(log_wbar)))
    return apply_frame(0.5 * (w + wbar), 0.5 * (w - wbar), swap, sign)


@jax.jit
def _exp(log_w, log_wbar):
    return jnp.exp(log_w), jnp.exp(log_wbar)
