"""The split's chunks solved matrix-free (docs/deep-linear.md, *Between the two ranges*): the layers' split
``W_l = A_l + α S_l`` moved in ``t`` by Kvaerno5 with Newton's equations solved by GMRES on Jacobian-vector products
(``gradflow._solver.stiff_solve``), until one of the chunk's ends (:data:`ENDS`) holds at the end of a step; the
thresholds of the ends, shared with the Radau chunks of gradflow/_deep_linear/_split.py."""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._solver import Solve, stiff_solve
from ._model import _unpack, layer_velocities, product
from ._split_fields import fields

ROTATION = 0.1
"""The frames turn when ``A``'s blocks off its learned ``k×k`` block exceed this fraction of its largest entry."""

SETTLED = 1e-2
"""After a jump ``A`` has settled (the frames turn once more and stay) where its velocity is at most this fraction
of ``atol + rtol``."""

ARMED = 10.0
"""A jump counts as settling only once ``A``'s velocity has exceeded ``ARMED`` times the settled one: a held plateau
(gradflow/_deep_linear/_held.py) hands ``A`` over at the settled speed, where the escaping mode has not yet moved it."""


def speed_of_A(A, gradient):
    """The largest entry of ``dA/dt = F(A)`` (``A``'s own flow, without ``S``): where it has settled after a jump."""
    G = gradient.at(product(A))
    return jnp.max(jnp.stack([jnp.abs(v).max() for v in layer_velocities(A, G)]))


class ChunkArgs(eqx.Module):
    """What a matrix-free chunk (``_Run._kvaerno_chunk`` of gradflow/_deep_linear/_split.py) needs: ``G`` in the frames, ``log α``, the layers'
    shapes, the learned rank ``k``, the escape level ``e``, whether a jump is settling and has armed, and the
    settled speed."""

    gradient: object
    log_alpha: jax.Array
    shapes: tuple = eqx.field(static=True)
    k: jax.Array
    escape: jax.Array
    jumping: jax.Array
    armed: jax.Array
    settled_speed: jax.Array


def _chunk_velocity(t, y, args: ChunkArgs):
    return fields(y, args.gradient, args.log_alpha, args.shapes)


ENDS = ("escaped", "turned", "settled", "armed")


def _chunk_conditions(y, args: ChunkArgs):
    """Whether each of :data:`ENDS` holds at ``y`` (``A`` and ``S`` packed), as the Radau chunks' events (``_Run._radau_chunk``)
    (``k`` a traced number: the blocks are masks, so one program serves every stage)."""
    L, k = len(args.shapes), args.k
    parts = _unpack(y, args.shapes * 2)
    A, S = parts[:L], parts[L:]

    def off(x):  # the mask of rows and columns from k on
        return (jnp.arange(x.shape[0]) >= k)[:, None] & (jnp.arange(x.shape[1]) >= k)[None, :]

    def learned(x):
        return (jnp.arange(x.shape[0]) < k)[:, None] & (jnp.arange(x.shape[1]) < k)[None, :]

    sleeping = jnp.max(jnp.stack([jnp.linalg.norm(jnp.where(off(s), s, 0.0), 2) for s in S]))
    escaped = sleeping * jnp.exp(args.log_alpha) >= args.escape
    size = jnp.max(jnp.stack([jnp.abs(a).max() for a in A]))
    outside = jnp.max(jnp.stack([jnp.abs(jnp.where(learned(a), 0.0, a)).max() for a in A]))
    turned = (k > 0) & (outside > ROTATION * size)
    speed = speed_of_A(A, args.gradient)
    settled = args.jumping & args.armed & (speed <= args.settled_speed)
    armed = args.jumping & ~args.armed & (speed > ARMED * args.settled_speed)
    return jnp.stack([escaped, turned, settled, armed])


_conditions = eqx.filter_jit(_chunk_conditions)


def _chunk_event(t, y, args: ChunkArgs, **kwargs):
    return jnp.any(_chunk_conditions(y, args))


def _chunk_solve(args: ChunkArgs, out_ts, rtol, atol) -> Solve:
    event = dfx.Event(_chunk_event)
    return stiff_solve(_chunk_velocity, args, out_ts, rtol=rtol, atol=atol, event=event, matrix_free=True)


@eqx.filter_jit
def chunk_start(args, y0, out_ts, rtol, atol):
    return _chunk_solve(args, out_ts, rtol, atol).start(y0)


@eqx.filter_jit
def chunk_advance(args, seg, budget, out_ts, rtol, atol):
    return _chunk_solve(args, out_ts, rtol, atol).advance(seg, budget)


def chunk_end(args: ChunkArgs, y) -> str:
    """Which of :data:`ENDS` ended a matrix-free chunk at ``y`` (the first that holds)."""
    return ENDS[int(np.argmax(np.asarray(_conditions(y, args))))]
