"""The sleeping layers of a deep linear network in the greedy limit (docs/deep-linear.md, *The greedy limit*): on
plateau ``k`` the layers are ``A^k + α S``, and ``S``, off the learned subspaces of ``A^k``, obeys the α-free flow
``dS_l/dτ = S_{>l}ᵀ G_k S_{<l}ᵀ`` (``theory.derive_sleeping_layers``). Its blow-up is the next stage: :func:`escape`
finds when, along which balanced rank-one direction, and what is left of ``S`` off it (followed beside the escaping
chain with their exact coupling, :func:`_follow`); :func:`off_frames` projects that rest off the learned subspaces of
the next stage's layers (:func:`learned_frames`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from .._config import check_interrupt
from ._model import _pack, _unpack, layer_velocities, product

# Where S has grown _READ-fold it is split into the chain P along its top balanced direction and the rest R = S − P,
# and R is followed beside P with their exact coupling (:func:`_follow`) until the chain has grown _FOLLOWED-fold.
# Read from S = e^ρ Θ instead, the rest (e^{−ρ} of Θ) carried Θ's error times the growth, and flowed alone from there
# it lost the blow-up's pull on it, which falls like 1/growth: 1e-6 to 1e-5 in the sleeping modes' log σ
# (docs/deep-linear.md, *The rest at an escape*). Followed further, the rounding of the chain's frames (eps × its
# growth) shows; from 1e8 to 1e9 the rest moves by 1.7e-9, 6.7e-8, 2.7e-9 at L = 3, 4, 5 (tests/deep_linear/
# test_sleeping.py); stopped at 1e4 it is 4e-7 to 7e-5 off.
_READ = 1e2
_FOLLOWED = 1e8
_NOISE = 1e-10  # a rest this small relative to S where it is read (Θ's error there is about 1e-12 of it) is rounding


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """What :func:`escape` keeps of ``S(τ)`` on the way (``τ`` from the plateau's start; :meth:`Escape.at` reads it):
    the dense outputs of ``(Θ, ρ, τ)`` in ``s`` (``S = e^ρ Θ``) up to ``read``, those of the chain beside the rest
    (:func:`_follow`, with its fixed ``hidden`` directions) up to ``followed``, the rest's own flow in ``τ`` from
    there to the escape, and ``g = uᵀGv``, the escaping direction's rate in its closed form."""

    pieces: tuple  # scipy OdeSolutions of (Θ, ρ, τ) in s, consecutive (none: S = 0)
    read: float  # τ where the rest was split from the chain (∞: never)
    rest: object  # scipy OdeSolution of the rest's flow in τ on [followed, Δ], or None
    g: float = 0.0
    chain: tuple = ()  # scipy OdeSolutions of _follow's state in its s, consecutive
    hidden: tuple = ()
    followed: float = math.inf  # τ where _follow stopped

    def dense(self, tau: float, shapes):
        """``(Θ, ρ)`` at ``τ``: the ``s`` where the dense output's ``τ`` reaches it (monotone in ``s``)."""
        z = _at_tau(self.pieces, tau, -1)
        return _unpack(z[:-2], shapes), float(z[-2])

    def followed_at(self, tau: float, shapes):
        """The chain's directions ``b``, its per-layer logs ``q`` and the rest ``R`` at ``τ`` (up to ``followed``)."""
        return _FollowState.of(_at_tau(self.chain, tau, _FollowState.tau_index(shapes)), shapes, self.hidden)


def _at_tau(solutions, tau: float, index: int) -> np.ndarray:
    """The state of consecutive dense outputs in ``s`` where its component ``index`` (``τ``, increasing) reaches
    ``tau`` (the last state if it never does)."""
    for sol in solutions:
        if sol(sol.t_max)[index] >= tau or sol is solutions[-1]:
            break
    lo, hi = sol.t_min, sol.t_max
    if sol(hi)[index] >= tau:
        hi = brentq(lambda s: sol(s)[index] - tau, lo, hi, xtol=1e-14 * max(1.0, hi), rtol=1e-14)
    return sol(hi)


def _log_sv(layers) -> np.ndarray:
    """The logs of the singular values of ``W_L ⋯ W_1``, descending (``−∞`` for zeros)."""
    with np.errstate(divide="ignore"):
        return np.log(np.linalg.svd(product(layers), compute_uv=False))


def _chain(layers) -> list[np.ndarray]:
    """The top balanced chain ``b_0 … b_L`` of layers: ``b_0`` the top right singular vector of ``W_1``, then
    ``b_l ∝ W_l b_{l−1}`` (so that ``b_lᵀ W_l b_{l−1} > 0``)."""
    b = [np.linalg.svd(layers[0])[2][0]]
    for layer in layers:
        b.append(layer @ b[-1] / np.linalg.norm(layer @ b[-1]))
    return b


def _chain_layers(b, q) -> list[np.ndarray]:
    """``e^{q_l} b_l b_{l−1}ᵀ``: the rank-one layers of the chain ``b`` with scales ``e^q``."""
    return [math.exp(q_l) * np.outer(b[l + 1], b[l]) for l, q_l in enumerate(q)]


def velocity_difference(layers, X, G) -> list[np.ndarray]:
    """``F(W + X) − F(W)`` for ``F_l(W) = W_{>l}ᵀ G W_{<l}ᵀ``, every term with at least one factor of ``X`` (nothing
    cancels): ``Δ_{<l+1} = X_l (W + X)_{<l} + W_l Δ_{<l}``, ``Δ_{>l}`` likewise, and
    ``Δ_{>l}ᵀ G W_{<l}ᵀ + W_{>l}ᵀ G Δ_{<l}ᵀ + Δ_{>l}ᵀ G Δ_{<l}ᵀ``."""
    L = len(layers)
    n_in, n_out = layers[0].shape[1], layers[-1].shape[0]
    below, below_d = [np.eye(n_in)], [np.zeros((n_in, n_in))]
    for w, x in zip(layers[:-1], X[:-1]):
        below_d.append(x @ (below[-1] + below_d[-1]) + w @ below_d[-1])
        below.append(w @ below[-1])
    above, above_d = [np.eye(n_out)] * L, [np.zeros((n_out, n_out))] * L
    for l in range(L - 1, 0, -1):
        above_d[l - 1] = (above[l] + above_d[l]) @ X[l] + above_d[l] @ layers[l]
        above[l - 1] = above[l] @ layers[l]
    out = []
    for l in range(L):
        left = above_d[l].T @ G
        out.append(left @ below[l].T + above[l].T @ G @ below_d[l].T + left @ below_d[l].T)
    return out


@dataclasses.dataclass(frozen=True)
class _FollowState:
    """:func:`_follow`'s state: the chain ``P_l = e^{q_l} b_l b_{l−1}ᵀ`` (``b_0 = v``, ``b_L = u``, the hidden ``b``
    fixed), ``τ`` and the rest ``R = S − P``, packed as ``[v, u, q, τ, R]``."""

    b: list
    q: np.ndarray
    tau: float
    R: list

    @staticmethod
    def tau_index(shapes) -> int:
        return shapes[0][1] + shapes[-1][0] + len(shapes)

    @classmethod
    def of(cls, y, shapes, hidden):
        n_in, n_out = shapes[0][1], shapes[-1][0]
        v, u = y[:n_in], y[n_in : n_in + n_out]
        b = [v / np.linalg.norm(v), *hidden, u / np.linalg.norm(u)]
        i = cls.tau_index(shapes)
        return cls(b, y[n_in + n_out : i], float(y[i]), _unpack(y[i + 1 :], shapes))

    def rest(self):
        """The rest off the frames of the chain of ``S = P + R`` (``b'``, as :func:`_chain` reads it), without
        forming ``S``: ``P`` off ``b'`` is ``e^{q_l} (I − b'b'ᵀ) b_l ((I − b'b'ᵀ) b_{l−1})ᵀ``. Returns ``(b', rest)``."""
        scale = float(np.mean(self.q))
        unit = _chain_layers(self.b, self.q - scale)
        b_new = _chain([w + math.exp(-scale) * r for w, r in zip(unit, self.R)])
        perp = [b - c * (c @ b) for b, c in zip(self.b, b_new)]
        P_off = _chain_layers(perp, self.q)
        return b_new, tuple(p + r for p, r in zip(P_off, off_frames(self.R, [c[:, None] for c in b_new])))


def _in_windows(rhs, y, *, atol, event, trajectory: bool, beyond=None):
    """DOP853 (``rtol = 1e-12``) from ``s = 0`` in windows of ``s`` that double, each going on with the last full step
    of the one before, until the terminal ``event`` (its ``s`` unknown: a blow-up lies at ``s = ∞``), a failure, or
    ``beyond(y)`` at a window's end. Returns ``(y, s, dense outputs, steps, whether the event fired)``."""
    solutions, s, steps, first = [], 0.0, 0, None
    for _ in range(60):
        sol = solve_ivp(
            rhs,
            (s, s + max(1.0, s)),
            y,
            method="DOP853",
            rtol=1e-12,
            atol=atol,
            events=event,
            dense_output=trajectory,
            first_step=first,
        )
        solutions.append(sol.sol)
        steps += len(sol.t) - 1
        y, s = sol.y[:, -1], float(sol.t[-1])
        if sol.status != 0:
            break
        check_interrupt()
        if beyond is not None and beyond(y):
            break
        first = float(sol.t[-2] - sol.t[-3]) if sol.t.size > 2 else None  # the last step ends at the window's end
    return y, s, tuple(solutions) if trajectory else (), steps, sol.status == 1


def _follow(G, S, tau: float, *, trajectory: bool):
    """The rest of ``S`` followed beside its top chain through the blow-up of ``dS_l/dτ = S_{>l}ᵀ G S_{<l}ᵀ``: ``S =
    P + R`` with ``P`` exactly rank-one per layer, ``P_l = p_l b_l b_{l−1}ᵀ``, whose own flow turns ``u = b_L`` by
    ``(Π p / p_L²)(I − uuᵀ) G v`` and ``v = b_0`` likewise and keeps the hidden ``b`` fixed; the rest moves by
    ``F(P + R) − F(P)`` (:func:`velocity_difference`), whose component along the chain goes to the ``p_l`` instead
    (so that ``R`` never carries the chain's growth). In ``s`` with ``dτ/ds = e^{−(L−2) q̄}`` (``q = log p``, ``q̄``
    their mean) every rate is bounded. From ``S`` at ``τ`` (where it has grown ``_READ``-fold) until ``q̄`` has grown
    by ``_FOLLOWED``: returns the end's :class:`_FollowState`, the blow-up's time (the tail from there in closed form),
    the hidden ``b``, the dense outputs (if ``trajectory``) and the steps."""
    shapes = [w.shape for w in S]
    L = len(S)
    b = _chain(S)
    q = np.log([b[l + 1] @ S[l] @ b[l] for l in range(L)])
    P = _chain_layers(b, q)
    R = [s - p for s, p in zip(S, P)]
    if np.linalg.norm(_pack(off_frames(R, [x[:, None] for x in b]))) <= _NOISE * np.linalg.norm(_pack(S)):
        R = [np.zeros(shape) for shape in shapes]  # nothing is left but the integration's error
    hidden = tuple(b[1:L])

    i = _FollowState.tau_index(shapes)
    n_in = shapes[0][1]
    bounds = np.cumsum([i + 1] + [m * n for m, n in shapes])

    def rhs(_, y):
        v, u, q = y[:n_in], y[n_in : i - L], y[i - L : i]
        v, u = v / math.sqrt(v @ v), u / math.sqrt(u @ u)
        b = [v, *hidden, u]
        mean = float(q.mean())
        rate, scale = np.exp(2 * (mean - q)), math.exp(mean)
        chain = [np.outer(b[l + 1], b[l]) for l in range(L)]
        X = [y[lo:hi].reshape(shape) / scale for lo, hi, shape in zip(bounds[:-1], bounds[1:], shapes)]
        dR = velocity_difference([math.exp(q[l] - mean) * c for l, c in enumerate(chain)], X, G)
        along = np.array([b[l + 1] @ d @ b[l] for l, d in enumerate(dR)]) * scale
        g = float(u @ G @ v)
        dq = g * rate + along * np.exp(-q)
        dv, du = rate[0] * (G.T @ u - g * v), rate[-1] * (G @ v - g * u)
        dR = [(scale * d - a * c).ravel() for d, a, c in zip(dR, along, chain)]
        return np.concatenate([dv, du, dq, [math.exp(-(L - 2) * mean)], *dR])

    top = float(np.mean(q)) + math.log(_FOLLOWED)

    def grown(_, y):
        return float(np.mean(y[i - L : i])) - top

    grown.terminal = True
    y = np.concatenate([b[0], b[-1], q, [tau], _pack(R)])
    atol = np.full(y.size, 1e-14)
    atol[i + 1 :] *= max(1.0, float(np.abs(y[i + 1 :]).max()))
    y, s, solutions, steps, _ = _in_windows(rhs, y, atol=atol, event=grown, trajectory=trajectory)
    end = _FollowState.of(y, shapes, hidden)
    # the blow-up's tail in closed form: a^{−(L−2)} = (L−2) g (Δ − τ) gives Δ − τ = 1/((L−2) dq̄/dτ); Δ as the integral
    # run on to (L−2)ρ = 36 had it, to an ulp (rotated 3×3 task, L = 3 to 6)
    rate = float(np.mean(rhs(s, y)[i - L : i]))
    blow_up = end.tau + math.exp(-(L - 2) * float(np.mean(end.q))) / ((L - 2) * rate)
    return end, blow_up, hidden, solutions, steps


@dataclasses.dataclass(frozen=True)
class Escape:
    """How the α-free flow of the sleeping layers ``S`` under ``G`` escapes (the module's first bullet): after
    ``delta`` (∞: it does not), along the unit balanced layers ``direction[l] = b_{l+1} b_lᵀ`` (``u = b_L``,
    ``v = b_0``), leaving ``rest``: ``S`` off the ``b_h`` at the escape; with ``trajectory``, ``S(τ)`` on the
    way (:class:`Trajectory`); ``steps``, the accepted steps of its solves."""

    delta: float
    direction: tuple
    u: np.ndarray
    v: np.ndarray
    rest: tuple
    trajectory: Trajectory | None = None
    steps: int = 0

    def at(self, tau: float) -> tuple[tuple, np.ndarray]:
        """``S(τ)`` (``τ`` from the plateau's start; needs ``trajectory``) and the logs of the singular values of
        ``S_L ⋯ S_1``, descending: ``e^ρ Θ`` from the dense output up to the read; then the chain beside the rest
        (:func:`_follow`; the chain's singular value is ``Π p_l``, the others the rest's off its frames); then
        ``a(τ) direction + rest(τ)``, the blow-up's closed form ``a^{−(L−2)} = (L−2) g (Δ − τ)`` beside the rest's
        own flow."""
        path, shapes = self.trajectory, [w.shape for w in self.rest]
        if not path.pieces:  # S = 0 stays there
            return tuple(np.zeros(shape) for shape in shapes), np.full(min(shapes[0][1], shapes[-1][0]), -math.inf)
        if tau <= path.read or path.rest is None:
            theta, rho = path.dense(tau, shapes)
            return tuple(math.exp(rho) * w for w in theta), len(theta) * rho + _log_sv(theta)
        if tau <= path.followed:
            state = path.followed_at(tau, shapes)
            b, rest = state.rest()
            S = tuple(p + r for p, r in zip(_chain_layers(state.b, state.q), state.R))
            log_top = float(np.sum(state.q))
        else:
            L = len(shapes)
            log_a = -math.log((L - 2) * path.g * max(self.delta - tau, 1e-300)) / (L - 2)
            rest = _unpack(path.rest(min(tau, self.delta)), shapes)
            S = tuple(r + math.exp(log_a) * d for r, d in zip(rest, self.direction))
            log_top = L * log_a
        return S, np.sort(np.append(_log_sv(rest)[:-1], log_top))[::-1]


def escape(G: np.ndarray, S, depth: int, *, trajectory: bool = False, horizon: float = math.inf) -> Escape:
    """The blow-up of ``dS_l/dτ = S_{>l}ᵀ G S_{<l}ᵀ`` from ``S`` (see the module), by DOP853 in the bounded
    variables ``(Θ, ρ, τ)`` until it has grown ``_READ``-fold, then its top chain beside the rest (:func:`_follow`)
    until the chain has grown ``_FOLLOWED``-fold: the time (its tail from there in closed form), the direction and what
    is left of ``S`` off it; with ``trajectory``, also ``S(τ)`` on the way (:class:`Trajectory`), and the
    search for a blow-up stops once ``τ`` passes ``horizon``."""
    shapes = [w.shape for w in S]
    y0 = _pack(S)
    r0 = float(np.linalg.norm(y0))
    L = depth

    def never(pieces=(), steps=0) -> Escape:
        """No blow-up (within ``horizon``): ``S`` is all rest, and its dense output so far if asked."""
        zeros = tuple(np.zeros(s) for s in shapes)
        path = Trajectory(tuple(pieces), math.inf, None) if trajectory else None
        return Escape(math.inf, zeros, np.zeros(G.shape[0]), np.zeros(G.shape[1]), tuple(S), path, steps)

    if r0 == 0.0:
        return never()

    def growth(theta):
        F = _pack(layer_velocities(_unpack(theta, shapes), G))
        return F, float(theta @ F)

    def rhs(_, z):
        F, lam = growth(z[:-2])
        return np.concatenate([F - lam * z[:-2], [lam, math.exp(min(-(L - 2) * z[-2], 700.0))]])

    def readable(_, z):
        return z[-2] - math.log(_READ * r0)

    readable.terminal = True
    z = np.concatenate([y0 / r0, [math.log(r0), 0.0]])
    z, _, pieces, steps, read = _in_windows(
        rhs, z, atol=1e-14, event=readable, trajectory=trajectory, beyond=lambda z: z[-1] > horizon
    )
    if not read:  # no blow-up within the windows, or past the horizon before one
        return never(pieces, steps)
    read = float(z[-1])
    end, tau, hidden, chain, more = _follow(
        G, [math.exp(z[-2]) * w for w in _unpack(z[:-2], shapes)], read, trajectory=trajectory
    )
    b, rest = end.rest()
    followed = end.tau
    # the rest's own flow over the escape's remaining time (e^{−(L−2)ρ} of the chain's), off the b_h to its accuracy
    sol = solve_ivp(
        lambda _, y: _pack(layer_velocities(_unpack(y, shapes), G)),
        (min(followed, tau), tau),
        _pack(rest),
        method="DOP853",
        rtol=1e-12,
        atol=1e-14 * max(1.0, float(np.abs(_pack(rest)).max())),
        dense_output=trajectory,
    )
    steps += more + len(sol.t) - 1
    along = [x[:, None] for x in b]
    path = None
    if trajectory:
        path = Trajectory(tuple(pieces), read, sol.sol, float(b[-1] @ G @ b[0]), chain, hidden, followed)
    direction = tuple(np.outer(b[l + 1], b[l]) for l in range(L))
    return Escape(tau, direction, b[-1], b[0], off_frames(_unpack(sol.y[:, -1], shapes), along), path, steps)


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
