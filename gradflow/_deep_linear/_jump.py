"""A jump of a deep linear network between two plateaus (docs/deep-linear.md, *Small α* and *The greedy limit*):
phase (B), the layers' flow in ``t`` from ``A^k + e b_l b_{l−1}ᵀ`` to the next stationary point, and the sleeping
layers carried through it by that flow linearised along it. Both are solved at the size of the rank they hold, not of
the layers.

*Phase (B) in hidden frames.* Let ``H_l`` (``d_l × r``, ``r = k + 1``) be an orthonormal basis of the learned
subspace of hidden space ``l`` and the escape's ``b_l`` (``H_0 = I_n``, ``H_L = I_m``). The velocity
``F_l = W_{>l}ᵀ G W_{<l}ᵀ`` has its columns in the row space of ``W_{l+1}`` and its rows in the column space of
``W_{l−1}``, so layers ``W_l = H_l M_l H_{l−1}ᵀ`` stay of that form, and ``M`` moves by the same flow,
``dM_l/dt = M_{>l}ᵀ G(M_L ⋯ M_1) M_{<l}ᵀ``: the flow of a network of hidden width ``r`` with the same loss, of size
``r(m + n) + (L − 2) r²`` instead of ``Σ_l d_l d_{l−1}``.

*The carry in three parts.* The linearised flow ``dS/dt = J(A(t)) S`` commutes with the rotations of the complements
``P_l`` of the frames (``A(t)`` is zero on them), so it splits by how many indices of a block lie in the ``P_l``:

- the blocks in the frames, ``H_lᵀ S_l H_{l−1}``, move by the narrow network's linearised flow alone. At an escape
  the rest is off the learned subspaces and off the ``b_h`` (:func:`~gradflow._deep_linear._sleeping.escape`), so
  they are zero and stay zero;
- for each hidden layer ``l``, the blocks with one index in ``P_l``: ``Y_l = [X_l, Z_lᵀ] = [P_lᵀ S_l H_{l−1},
  (H_{l+1}ᵀ S_{l+1} P_l)ᵀ]``, whose rows each behave as the row ``x`` and column ``z`` of one more hidden unit of the
  narrow network: ``dX_l/dt = Z_lᵀ E_l``, ``dZ_lᵀ/dt = X_l E_lᵀ`` with ``E_l = M_{>l+1}ᵀ G M_{<l}ᵀ``. ``E_l``
  vanishes where ``A`` is stationary (the layers' Hessian is zero on the sleeping hidden coordinates,
  gradflow/_deep_linear/_gauge.py) and is of the size of ``G`` inside the jump: not stiff, so DOP853 solves it, on
  ``Y_l``'s at most ``r_{l−1} + r_{l+1}`` independent rows;
- the blocks ``P_lᵀ S_l P_{l−1}`` do not move (no term of the linearised velocity reaches them).
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from scipy.integrate import DOP853, OdeSolution, solve_ivp

from .._config import check_interrupt
from .._kit._greedy import GreedyTolerances
from ._model import DeepLinearModel, _pack, _unpack, flat_jacobian, flat_velocities, product
from ._sleeping import Escape, learned_frames


def narrow_shapes(shapes, width: int) -> tuple[tuple[int, int], ...]:
    """The layer ``shapes`` of a network with every hidden width ``width`` (the input and output kept)."""
    L = len(shapes)
    return tuple((shape[0] if l == L - 1 else width, shape[1] if l == 0 else width) for l, shape in enumerate(shapes))


def hidden_frames(A, rank: int, escaping: Escape) -> tuple[np.ndarray, ...]:
    """``H_0 = I_n``, ``H_l`` an orthonormal basis of the ``rank`` learned directions of hidden space ``l`` of the
    layers ``A`` followed by the escaping chain's ``b_l`` (``b_{l+1} = direction_l b_l`` from ``b_0 = v``),
    ``H_L = I_m``."""
    learned, b = learned_frames(A, rank), escaping.v
    frames = [np.eye(A[0].shape[1])]
    for l in range(1, len(A)):
        b = escaping.direction[l - 1] @ b
        frames.append(np.linalg.qr(np.column_stack([learned[l], b]))[0])
    return tuple(frames + [np.eye(A[-1].shape[0])])


def narrow(layers, frames) -> list[np.ndarray]:
    """``M_l = H_lᵀ W_l H_{l−1}``: the layers in the frames."""
    return [H_out.T @ w @ H_in for w, H_in, H_out in zip(layers, frames[:-1], frames[1:])]


def wide(layers, frames) -> list[np.ndarray]:
    """``W_l = H_l M_l H_{l−1}ᵀ``: narrow layers back in the layers' own coordinates."""
    return [H_out @ m @ H_in.T for m, H_in, H_out in zip(layers, frames[:-1], frames[1:])]


def phase_b(model: DeepLinearModel, layers, scale: float, tol: GreedyTolerances, horizon: float, record=None):
    """The layers' flow ``dW_l/dt = W_{>l}ᵀ G W_{<l}ᵀ`` from ``layers`` (of any hidden widths) until stationary: its
    velocities at most ``tol.stationary · scale``. Windows of ``t`` from ``horizon``, doubling, by Radau with the exact
    Jacobian (the learned modes are stiff once the new one has grown), at most ``tol.max_steps`` steps. Returns
    ``(layers, stationarity, converged)``; a list ``record`` receives each window's dense output (a scipy
    ``OdeSolution``)."""
    shapes = tuple(w.shape for w in layers)
    y, t, steps = _pack(layers), 0.0, 0

    def rhs(_, y):
        return np.asarray(flat_velocities(model, y, shapes))

    def jac(_, y):
        return np.asarray(flat_jacobian(model, y, shapes))

    size = max(1.0, float(np.abs(y).max()))
    while steps < tol.max_steps:
        sol = solve_ivp(
            rhs,
            (t, t + horizon),
            y,
            method="Radau",
            jac=jac,
            rtol=tol.ode_rtol,
            atol=tol.ode_atol * size,
            dense_output=record is not None,
        )
        if record is not None:
            record.append(sol.sol)
        y, t, steps = sol.y[:, -1], t + horizon, steps + len(sol.t) - 1
        stationarity = float(np.abs(rhs(t, y)).max()) / scale
        if not sol.success or not np.all(np.isfinite(y)):
            return _unpack(y, shapes), stationarity, False
        if stationarity <= tol.stationary:
            return _unpack(y, shapes), stationarity, True
        horizon *= 2.0
        check_interrupt()
    return _unpack(y, shapes), stationarity, False


def start_scale(L: int, eps: float, G, u, v) -> tuple[float, float]:
    """Phase (B)'s per-layer scale ``e = ε^{1/(L−2)}`` of the new direction ``u vᵀ`` and its first window of ``t``,
    ``1/((L−2) ε uᵀGv)``, after which the new mode has escaped."""
    return eps ** (1.0 / (L - 2)), 1.0 / ((L - 2) * eps * float(u @ G @ v))


def _solution_at(record, t: float) -> np.ndarray:
    """The packed state at ``t`` from consecutive dense outputs ``record`` (their last value beyond their end)."""
    sol = next(sol for sol in record if sol.t_max >= t or sol is record[-1])
    return sol(min(t, sol.t_max))


@dataclasses.dataclass(frozen=True)
class Jump:
    """Phase (B) out of a stage: the hidden ``frames`` ``H_0 … H_L`` and the dense outputs ``record`` in ``t`` of the
    narrow layers ``M_l = H_lᵀ W_l H_{l−1}``, packed (empty where only the end was kept)."""

    frames: tuple
    record: tuple = ()

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        return tuple((H_out.shape[1], H_in.shape[1]) for H_in, H_out in zip(self.frames[:-1], self.frames[1:]))

    @property
    def t_end(self) -> float:
        return self.record[-1].t_max

    @property
    def steps(self) -> int:
        return sum(len(sol.ts) - 1 for sol in self.record)

    def narrow_at(self, t: float) -> list[np.ndarray]:
        return _unpack(_solution_at(self.record, t), self.shapes)

    def layers_at(self, t: float) -> list[np.ndarray]:
        """The layers ``W_l(t)`` (the last ones beyond the jump's end)."""
        return wide(self.narrow_at(t), self.frames)

    def settled(self, tol: float) -> float:
        """The first step's end ``t`` from which the layers stay within ``tol`` (relative to the largest entry) of
        their end: where the jump has settled and the next plateau begins."""
        y_end = _solution_at(self.record, self.t_end)
        bound = tol * max(1.0, float(np.abs(y_end).max()))
        times = np.concatenate([sol.ts for sol in self.record])
        far = np.concatenate([np.abs(sol(sol.ts) - y_end[:, None]).max(axis=0) > bound for sol in self.record])
        last_far = np.flatnonzero(far)[-1] if far.any() else -1
        return float(times[min(last_far + 1, times.size - 1)])


def jump_from(
    model: DeepLinearModel,
    A,
    rank: int,
    out: Escape,
    G,
    eps: float,
    scale: float,
    tol: GreedyTolerances,
    *,
    dense=False,
):
    """Phase (B) out of a stage with ``rank`` learned modes in the layers ``A``: the layers' flow from
    ``A + e b_l b_{l−1}ᵀ`` (the escape ``out``'s direction, at :func:`start_scale`), solved in the frames of
    :func:`hidden_frames`. Returns ``(layers, stationarity, converged, jump)``, ``layers`` in the layers' own
    coordinates and ``jump`` a :class:`Jump` (with its dense outputs if ``dense``)."""
    e, window = start_scale(model.depth, eps, G, out.u, out.v)
    frames = hidden_frames(A, rank, out)
    start = narrow([a + e * d for a, d in zip(A, out.direction)], frames)
    record = [] if dense else None
    layers, stationarity, ok = phase_b(model, start, scale, tol, window, record)
    return wide(layers, frames), stationarity, ok, Jump(frames, tuple(record or ()))


def _complement(H: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the orthogonal complement of ``H``'s orthonormal columns."""
    return np.linalg.qr(H, mode="complete")[0][:, H.shape[1] :]


@eqx.filter_jit
def _couplings(model, y, shapes):
    """``E_l = M_{>l+1}ᵀ G(W) M_{<l}ᵀ`` (``l = 1 … L−1``) at the narrow layers ``y`` (packed): an extra hidden unit at
    layer ``l``, with row ``x`` in ``W_l`` and column ``z`` in ``W_{l+1}``, moves ``W`` only at second order
    (``M_{>l+1} z x M_{<l}``), so to first order ``dx/dt = zᵀ E_l`` and ``dz/dt = E_l xᵀ``: ``B_l = [[0, E_lᵀ],
    [E_l, 0]]``."""
    layers = _unpack(y, shapes)
    G = model.G(product(layers))
    L = len(layers)
    below = [None] * L  # M_{<l}ᵀ, None for the identity
    for l in range(1, L):
        below[l] = layers[l - 1].T if below[l - 1] is None else below[l - 1] @ layers[l - 1].T
    above = G  # M_{>l+1}ᵀ G
    out = [None] * (L - 1)
    for l in range(L - 1, 0, -1):
        out[l - 1] = above if below[l - 1] is None else above @ below[l - 1]
        above = layers[l].T @ above
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Carry:
    """The sleeping layers carried through a :class:`Jump` (the module's three parts): for each hidden layer ``l``,
    ``bases[l−1]`` (``Y_l = bases[l−1] R_l``, orthonormal columns) and ``P_l``; ``solution``, the dense output of the
    ``R_l``, packed; ``still``, the blocks ``P_lᵀ S_l P_{l−1}`` (``l = 2 … L−1``)."""

    jump: Jump
    complements: tuple
    bases: tuple
    solution: object
    still: tuple

    @property
    def steps(self) -> int:
        return 0 if self.solution is None else len(self.solution.ts) - 1

    def rest_at(self, t: float) -> list[np.ndarray]:
        """The sleeping layers ``S_l(t)`` in the layers' own coordinates (their last value beyond the jump's end)."""
        H, P, shapes = self.jump.frames, (None, *self.complements, None), self._shapes
        if self.solution is None:  # every hidden layer is full: no block has an index off the frames
            blocks = [np.zeros(shape) for shape in shapes]
        else:
            blocks = _unpack(self.solution(min(t, self.solution.t_max)), shapes)
        Y = [Q @ R for Q, R in zip(self.bases, blocks)]
        L = len(H) - 1
        out = []
        for l in range(1, L + 1):
            S = np.zeros((H[l].shape[0], H[l - 1].shape[0]))
            if l < L:  # rows in P_l, columns in the frame H_{l−1}
                S += P[l] @ Y[l - 1][:, : H[l - 1].shape[1]] @ H[l - 1].T
            if l > 1:  # rows in the frame H_l, columns in P_{l−1}
                S += H[l] @ Y[l - 2][:, H[l - 2].shape[1] :].T @ P[l - 1].T
            if 1 < l < L:
                S += P[l] @ self.still[l - 2] @ P[l - 1].T
            out.append(S)
        return out

    @property
    def _shapes(self):
        return tuple(
            (Q.shape[1], H_in.shape[1] + H_out.shape[1])
            for Q, H_in, H_out in zip(self.bases, self.jump.frames[:-2], self.jump.frames[2:])
        )


_REACH = 10.0
"""The carry's steps are at most this many of phase (B)'s where they start. On the cross-entropy task's first jump
(L = 3, ``atol = 1e-8``, docs/deep-linear.md) one, three, ten and thirty took 310, 107, 36 and 32 steps, within 3e-11,
1e-10, 1.1e-8 and 4.8e-7 of a Radau solve of the whole layers' linearised flow at 1e-10 (the error estimate does not
see the kinks of phase (B)'s dense output, which grow with the steps it spans); unbounded, DOP853 passed over the whole
jump in 8 steps. Ten keeps the carry at the tolerance and the small-α path's steps within the flat-cost goal
(docs/benchmarks.md: 856 steps at L = 3 from the aligned start, 963 at three)."""


def _along(rhs, y0, jump: Jump, rtol: float, atol: float):
    """DOP853 on ``dy/dt = rhs(t, y)`` over the jump, each step at most :data:`_REACH` of phase (B)'s steps where
    it starts (at the start of the jump ``E_l`` is nearly zero, and the error estimate alone lets the steps grow past
    it). Returns the dense output (a scipy ``OdeSolution``) and ``""``, or ``None`` and where and why it stopped."""
    knots = np.unique(np.concatenate([sol.ts for sol in jump.record]))
    lengths = np.diff(knots)
    solver = DOP853(rhs, 0.0, y0, jump.t_end, rtol=rtol, atol=atol, first_step=float(lengths[0]))
    ts, pieces = [0.0], []
    while solver.status == "running":
        solver.max_step = _REACH * float(
            lengths[min(np.searchsorted(knots, solver.t, side="right") - 1, lengths.size - 1)]
        )
        message = solver.step()
        if solver.status == "failed":
            return None, f"DOP853 stopped at t = {solver.t:.6g} of {jump.t_end:.6g}: {message}"
        ts.append(solver.t)
        pieces.append(solver.dense_output())
    return OdeSolution(ts, pieces), ""


def carry(model: DeepLinearModel, jump: Jump, rest, tol: GreedyTolerances):
    """The sleeping layers ``rest`` (in units of α; off the frames, as an escape leaves them) carried through
    ``jump``: the layers' flow linearised along it, ``dS/dt = J(A(t)) S`` (the flow of ``A + αS`` to first order in
    α), in the module's three parts, by DOP853 at most at phase (B)'s steps (:func:`_along`). Returns the
    :class:`Carry`, ``S`` at the jump's end and ``""``, or, if DOP853 stops short of that end, ``None``, ``None`` and
    where and why it stopped."""
    H, L = jump.frames, len(rest)
    P = [_complement(h) for h in H[1:-1]]
    bases, blocks = [], []
    for l in range(1, L):
        Y = np.hstack([P[l - 1].T @ rest[l - 1] @ H[l - 1], (H[l + 1].T @ rest[l] @ P[l - 1]).T])
        Q, R = np.linalg.qr(Y)
        bases.append(Q)
        blocks.append(R)
    still = tuple(P[l - 1].T @ rest[l - 1] @ P[l - 2] for l in range(2, L))
    shapes, narrow_shapes_ = tuple(R.shape for R in blocks), jump.shapes
    y0 = _pack(blocks)

    def rhs(t, y):
        E = _couplings(model, jnp.asarray(_solution_at(jump.record, t)), narrow_shapes_)
        velocities = []
        for R, e, H_in in zip(_unpack(y, shapes), E, H[:-2]):
            e, split = np.asarray(e), H_in.shape[1]  # R = [X, Zᵀ]: dX/dt = Zᵀ E, dZᵀ/dt = X Eᵀ
            velocities.append(np.hstack([R[:, split:] @ e, R[:, :split] @ e.T]).ravel())
        return np.concatenate(velocities)

    if y0.size == 0:
        out = Carry(jump, tuple(P), tuple(bases), None, still)
        return out, out.rest_at(math.inf), ""
    solution, failure = _along(rhs, y0, jump, tol.ode_rtol, tol.ode_atol * max(1.0, float(np.abs(y0).max())))
    if failure:
        return None, None, failure
    out = Carry(jump, tuple(P), tuple(bases), solution, still)
    return out, out.rest_at(math.inf), ""
