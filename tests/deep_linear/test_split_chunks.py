"""The ends of the split's matrix-free chunks (gradflow/_deep_linear/_split_chunks.py) on states built by hand: the
escape of the sleeping blocks' top mode, the turn of the frames, the settling after a jump and its arming, read in one
program for every learned rank ``k`` (a traced mask). The chunks themselves against Radau's are in test_split.py."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from deep_linear_common import S, whitened

from gradflow._deep_linear import _split_chunks
from gradflow._deep_linear._model import _pack
from gradflow._deep_linear._split_fields import split_gradient


def _ends(A, Sl, k, *, alpha=1e-8, escape=1e-3, jumping=False, armed=False, settled_speed=1e-10):
    model = whitened(3)
    with jax.enable_x64(True):
        gradient = split_gradient(model, free=True).in_frames([np.eye(3)] * 4)
        args = _split_chunks.ChunkArgs(
            gradient,
            jnp.asarray(math.log(alpha)),
            tuple(a.shape for a in A),
            jnp.asarray(k),
            jnp.asarray(escape),
            jnp.asarray(jumping),
            jnp.asarray(armed),
            jnp.asarray(settled_speed),
        )
        y = jnp.asarray(_pack(A + Sl))
        held = dict(zip(_split_chunks.ENDS, np.asarray(_split_chunks._chunk_conditions(y, args)).tolist()))
        return held, _split_chunks.chunk_end(args, y) if any(held.values()) else None


def _learned(k):
    """The layers of the whitened task's first ``k`` modes at rest (``A_l = diag(s_i^{1/3})`` on them)."""
    a = np.zeros((3, 3))
    a[:k, :k] = np.diag(S[:k] ** (1 / 3))
    return [a.copy() for _ in range(3)]


def test_the_ends_of_a_chunk():
    small = [0.1 * np.eye(3) for _ in range(3)]
    held, end = _ends(_learned(1), small, 1)
    assert not any(held.values()) and end is None  # a settled stage, its sleeping blocks far below the escape
    grown = [s.copy() for s in small]
    grown[1][2, 1] = 2e5  # α ‖S_ss‖ = 2e-3 ≥ e = 1e-3; the same entry at k = 2 lies in a learned block's row
    assert _ends(_learned(1), grown, 1) == (
        {"escaped": True, "turned": False, "settled": False, "armed": False},
        "escaped",
    )
    assert not _ends(_learned(2), grown, 2)[0]["escaped"]
    tilted = _learned(1)
    tilted[0][1, 0] = 0.2 * tilted[0][0, 0]  # off the learned block by more than ROTATION of A's largest entry
    assert _ends(tilted, small, 1)[1] == "turned"
    assert not _ends(tilted, small, 0)[0]["turned"]  # nothing learned: no frame to turn
    assert _ends(_learned(1), small, 1, jumping=True, armed=True)[1] == "settled"
    moving = _learned(1)
    moving[0][0, 0] *= 0.5  # away from rest: A's velocity far above the settled speed
    assert _ends(moving, small, 1, jumping=True)[1] == "armed"
    assert not any(_ends(moving, small, 1, jumping=True, armed=True)[0].values())
