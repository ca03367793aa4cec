"""The sleeping layers of a deep linear network in the greedy limit (docs/deep-linear.md, *The greedy limit*): on
plateau ``k`` the layers are ``A^k + α S``, and ``S``, off the learned subspaces of ``A^k``, obeys the α-free flow
``dS_l/dτ = S_{>l}ᵀ G_k S_{<l}ᵀ`` (``theory.derive_sleeping_layers``). Its blow-up is the next stage: :func:`escape`
finds when, along which balanced rank-one direction, and what is left of ``S`` off it; :func:`off_frames` projects
that rest off the learned subspaces of the next stage's layers (:func:`learned_frames`)."""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from .._config import check_interrupt
from ._model import DeepLinearModel, _pack, _unpack, flat_jacobian, flat_velocities, layer_velocities, product

_ESCAPED = 36.0  # (L−2)ρ at which the blow-up's integral is cut: the tail e^{−36}/((L−2)λ) is added in closed form
# the rest of S is read where S has grown by this factor, and then flowed on alone to the escape: what the blow-up's
# own pull on it still adds falls as the growth does, and later the rest (e^{−ρ} of Θ) would drown in the error of Θ.
# The cut waits for that read (at L ≥ 5 (L−2)ρ = 36 comes first, at a growth of 1.6e5 (L = 5) or 8e3 (L = 6), where
# the rest read there was off by 9e-3 and 0.37 in log σ after the jump; read at 1e7, 4e-4 at L = 5;
# docs/deep-linear.md, *Between the two ranges*).
_REST_GROWTH = 1e7
_NOISE = 1e-9  # a rest this small relative to S (the error of Θ times e^ρ is ≲ 1e-5 of S) is rounding


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """What :func:`escape` keeps of ``S(τ)`` on the way (``τ`` from the plateau's start; :meth:`Escape.at` reads it):
    the dense outputs of ``(Θ, ρ, τ)`` in ``s`` (``S = e^ρ Θ``) up to ``read``, the rest's own flow in ``τ`` from
    there, and ``g = uᵀGv``, the escaping direction's rate in its closed form."""

    pieces: tuple  # scipy OdeSolutions of (Θ, ρ, τ) in s, consecutive (none: S = 0)
    read: float  # τ where the rest was read (∞: never)
    rest: object  # scipy OdeSolution of the rest's flow in τ on [read, Δ], or None
    g: float = 0.0

    def dense(self, tau: float, shapes):
        """``(Θ, ρ)`` at ``τ``: the ``s`` where the dense output's ``τ`` reaches it (monotone in ``s``)."""
        for sol in self.pieces:
            if sol(sol.t_max)[-1] >= tau or sol is self.pieces[-1]:
                break
        lo, hi = sol.t_min, sol.t_max
        if sol(hi)[-1] >= tau:
            hi = brentq(lambda s: sol(s)[-1] - tau, lo, hi, xtol=1e-14 * max(1.0, hi), rtol=1e-14)
        z = sol(hi)
        return _unpack(z[:-2], shapes), float(z[-2])


def _log_sv(layers) -> np.ndarray:
    """The logs of the singular values of ``W_L ⋯ W_1``, descending (``−∞`` for zeros)."""
    with np.errstate(divide="ignore"):
        return np.log(np.linalg.svd(product(layers), compute_uv=False))


@dataclasses.dataclass(frozen=True)
class Escape:
    """How the α-free flow of the sleeping layers ``S`` under ``G`` escapes (the module's first bullet): after
    ``delta`` (∞: it does not), along the unit balanced layers ``direction[l] = b_{l+1} b_lᵀ`` (``u = b_L``,
    ``v = b_0``), leaving ``rest``: ``S`` off the ``b_h`` at the escape; with ``trajectory``, ``S(τ)`` on the
    way (:class:`Trajectory`)."""

    delta: float
    direction: tuple
    u: np.ndarray
    v: np.ndarray
    rest: tuple
    trajectory: Trajectory | None = None

    def at(self, tau: float) -> tuple[tuple, np.ndarray]:
        """``S(τ)`` (``τ`` from the plateau's start; needs ``trajectory``) and the logs of the singular values of
        ``S_L ⋯ S_1``, descending: ``e^ρ Θ`` from the dense output up to the read, then ``a(τ) direction +
        rest(τ)``, the blow-up's closed form ``a^{−(L−2)} = (L−2) g (Δ − τ)`` beside the rest's own flow."""
        path, shapes = self.trajectory, [w.shape for w in self.rest]
        if not path.pieces:  # S = 0 stays there
            return tuple(np.zeros(shape) for shape in shapes), np.full(min(shapes[0][1], shapes[-1][0]), -math.inf)
        if tau <= path.read or path.rest is None:
            theta, rho = path.dense(tau, shapes)
            return tuple(math.exp(rho) * w for w in theta), len(theta) * rho + _log_sv(theta)
        L = len(shapes)
        log_a = -math.log((L - 2) * path.g * max(self.delta - tau, 1e-300)) / (L - 2)
        rest = _unpack(path.rest(min(tau, self.delta)), shapes)
        S = tuple(r + math.exp(log_a) * d for r, d in zip(rest, self.direction))
        return S, np.sort(np.append(_log_sv(rest)[:-1], L * log_a))[::-1]


def escape(G: np.ndarray, S, depth: int, *, trajectory: bool = False, horizon: float = math.inf) -> Escape:
    """The blow-up of ``dS_l/dτ = S_{>l}ᵀ G S_{<l}ᵀ`` from ``S`` (see the module), by DOP853 in the bounded
    variables ``(Θ, ρ, τ)``: the time, the direction and what is left of ``S`` off it; with ``trajectory``, also
    ``S(τ)`` on the way (:class:`Trajectory`), and the search for a blow-up stops once ``τ`` passes ``horizon``."""
    shapes = [w.shape for w in S]
    y0 = _pack(S)
    r0 = float(np.linalg.norm(y0))
    L = depth

    def never(pieces=()) -> Escape:
        """No blow-up (within ``horizon``): ``S`` is all rest, and its dense output so far if asked."""
        zeros = tuple(np.zeros(s) for s in shapes)
        path = Trajectory(tuple(pieces), math.inf, None) if trajectory else None
        return Escape(math.inf, zeros, np.zeros(G.shape[0]), np.zeros(G.shape[1]), tuple(S), path)

    if r0 == 0.0:
        return never()

    def growth(theta):
        F = _pack(layer_velocities(_unpack(theta, shapes), G))
        return F, float(theta @ F)

    def rhs(_, z):
        F, lam = growth(z[:-2])
        return np.concatenate([F - lam * z[:-2], [lam, math.exp(min(-(L - 2) * z[-2], 700.0))]])

    def escaped(_, z):  # past the cut, and past the rest's read
        return min((L - 2) * z[-2] - _ESCAPED, z[-2] - math.log(_REST_GROWTH * r0) - 1.0)

    def settled(_, z):
        return z[-2] - math.log(_REST_GROWTH * r0)

    escaped.terminal, settled.direction = True, 1.0
    z, s, read, pieces = np.concatenate([y0 / r0, [math.log(r0), 0.0]]), 0.0, None, []
    for _ in range(60):  # windows of s until ρ reaches the cut (each window doubles)
        sol = solve_ivp(
            rhs,
            (s, s + max(1.0, s)),
            z,
            method="DOP853",
            rtol=1e-12,
            atol=1e-14,
            events=(escaped, settled),
            dense_output=trajectory,
        )
        if trajectory and read is None:
            pieces.append(sol.sol)
        if read is None and sol.y_events[1].size:
            read = sol.y_events[1][0]
        z, s = sol.y[:, -1], float(sol.t[-1])
        if sol.status == 1:
            break
        check_interrupt()
        if z[-1] > horizon and read is None:
            break
    if sol.status != 1:  # no blow-up within the windows, or past the horizon before one
        return never(pieces)
    read = z if read is None else read
    theta = _unpack(z[:-2], shapes)
    lam = growth(z[:-2])[1]
    tau = float(z[-1]) + math.exp(-(L - 2) * z[-2]) / ((L - 2) * lam)
    b = [np.linalg.svd(theta[0])[2][0]]
    for layer in theta:
        b.append(layer @ b[-1] / np.linalg.norm(layer @ b[-1]))
    direction = tuple(np.outer(b[l + 1], b[l]) for l in range(L))
    along = [x[:, None] for x in b]  # the direction's one-dimensional frames
    rest = off_frames([math.exp(read[-2]) * w for w in _unpack(read[:-2], shapes)], along)
    if np.linalg.norm(_pack(rest)) <= _NOISE * r0:  # nothing is left but the integration's error
        rest = tuple(np.zeros(s) for s in shapes)
    # the rest's own flow over the escape's remaining time, which keeps it off the b_h (to the accuracy of b)
    sol = solve_ivp(
        lambda _, y: _pack(layer_velocities(_unpack(y, shapes), G)),
        (float(read[-1]), tau),
        _pack(rest),
        method="DOP853",
        rtol=1e-12,
        atol=1e-14 * max(1.0, float(np.abs(_pack(rest)).max())),
        dense_output=trajectory,
    )
    path = None
    if trajectory:
        path = Trajectory(tuple(pieces), float(read[-1]), sol.sol, float(b[-1] @ G @ b[0]))
    return Escape(tau, direction, b[-1], b[0], off_frames(_unpack(sol.y[:, -1], shapes), along), path)


def learned_frames(layers, rank: int) -> list[np.ndarray]:
    """Orthonormal bases ``Q_0 … Q_L`` of the learned subspaces of the input, hidden and output spaces of layers
    holding a rank-``rank`` ``W``: the row space of ``W_1`` and the column spaces of ``W_1 … W_L``."""
    return [np.linalg.svd(layers[0])[2][:rank].T] + [np.linalg.svd(w)[0][:, :rank] for w in layers]


def off_frames(S, frames) -> tuple:
    """``(I − Q_l Q_lᵀ) S_l (I − Q_{l−1} Q_{l−1}ᵀ)``: the sleeping layers off the subspaces spanned by the
    orthonormal columns of ``frames`` (the learned ones, or an escape's direction)."""
    out = []
    for w, Q_in, Q_out in zip(S, frames[:-1], frames[1:]):
        w = w - Q_out @ (Q_out.T @ w)
        out.append(w - (w @ Q_in) @ Q_in.T)
    return tuple(out)


def layers_at(record, t: float) -> np.ndarray:
    """Phase (B)'s layers, packed, at ``t`` from its dense outputs ``record`` (its last value beyond its end)."""
    sol = next(sol for sol in record if sol.t_max >= t or sol is record[-1])
    return sol(min(t, sol.t_max))


@eqx.filter_jit
def _carried_velocity(model, y, s, shapes):
    return jax.jvp(lambda z: flat_velocities(model, z, shapes), (y,), (s,))[1]


def carried(model: DeepLinearModel, record, rest, tol):
    """The sleeping layers ``rest`` (in units of α) carried through phase (B): the layers' flow linearised along it,
    ``dS/dt = J(A(t)) S`` (``J = ∂F/∂W``, phase (B)'s Jacobian; the flow of ``A + αS`` to first order in α), from
    phase (B)'s dense outputs ``record``, by Radau from phase (B)'s first step and at most its longest (at the start of
    phase (B) ``J`` is nearly zero, and LSODA or BDF left to choose their steps passed over the whole jump in a few).
    Returns the dense outputs of ``S`` (a list of scipy ``OdeSolution``s), ``S`` at phase (B)'s end and ``""``, or,
    if Radau stops short of that end, ``None``, ``None`` and where and why it stopped. While a jump turns the learned
    subspaces of ``A``, the blocks of ``S`` that meet them turn into the sleeping block: projecting ``rest`` off the
    new subspaces instead (as until 2026-11-30) put the sleeping modes' ``log σ`` off by up to 2e-3 after a jump
    (docs/deep-linear.md, *Between the two ranges*)."""
    shapes = tuple(w.shape for w in rest)
    y0 = _pack(rest)
    steps = np.diff(np.unique(np.concatenate([sol.ts for sol in record])))
    sol = solve_ivp(
        lambda t, y: np.asarray(_carried_velocity(model, layers_at(record, t), y, shapes)),
        (0.0, record[-1].t_max),
        y0,
        method="Radau",
        jac=lambda t, _: np.asarray(flat_jacobian(model, layers_at(record, t), shapes)),
        rtol=tol.ode_rtol,
        atol=tol.ode_atol * max(1.0, float(np.abs(y0).max())),
        first_step=float(steps[0]),
        max_step=float(steps.max()),
        dense_output=True,
    )
    if not sol.success:
        return None, None, f"Radau stopped at t = {sol.t[-1]:.6g} of {record[-1].t_max:.6g}: {sol.message}"
    return [sol.sol], _unpack(sol.y[:, -1], shapes), ""
