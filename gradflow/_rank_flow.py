"""The exact gradient flow of a factorised model from small initialisation, and float64 gradient descent for
comparison (docs/math.md, *Full weights: the exact flow*).

For each weight matrix, ``Z = [U; V]`` solves the linear equation ``dZ/dt = A Z`` with the symmetric
``A = [[0, G], [Gᵀ, 0]]``, ``G = −∇_W L``, and conserves ``C = Zᵀ J Z = UᵀU − VᵀV`` (``J = diag(I, −I)``).
The flow carries the continuous QR factorisation ``Z = Q diag(e^ρ) R̃`` (Dieci, Russell & Van Vleck):
``Q`` with orthonormal columns, log scales ``ρ``, ``R̃`` unit upper triangular,

    Q' = A Q − Q T,   ρ' = diag(B),   R̃' = (E ∘ 2 triu(B, 1)) R̃,
    B = Qᵀ A Q,   T = diag(B) + 2 triu(B, 1),   E_ij = e^{ρ_j − ρ_i},

which never forms ``e^ρ`` where it matters: ``ρ`` lies in ``[2 log α, O(1)]`` and the state needs ``log α``
only. After every step the gauge is fixed: columns are kept sorted by ``ρ`` (so that ``E`` stays bounded)
by a rotation ``Z → Z O`` that leaves ``W = U Vᵀ`` unchanged, and ``QᵀJQ = diag(e^{−ρ}) R̃⁻ᵀ C R̃⁻¹
diag(e^{−ρ})`` is restored from the conserved ``C``, exactly where rounding would lose it.
"""

from __future__ import annotations

import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from ._checks import check_int, check_scales, check_times
from ._config import float64
from ._factorized import FactorizedModel, check_factorized_model, check_factors
from ._flow import WrappedSolver, _status, solve_onto, solve_separately, vmap_batches

_SOLVERS = ("auto", "tsit5", "kvaerno5")
_STIFF_LOG = 2000.0  # "auto" takes the implicit solver when log(1/α) exceeds this (a plateau lasts ∝ log(1/α));
# below, Tsit5 is far cheaper: on the full-weight toy (state of 300 numbers) at α = 1e-32 it took 806 steps in ~20 s,
# Kvaerno5 with its dense Jacobian more than ten minutes; on the demo's d = 3 head at log α = −1000, 2.0 s against
# 42 s, and still 18 s against 62 s at −1e4 (docs/benchmarks.md, Full weights). Tsit5's steps grow ∝ log(1/α).
_SWAP_MARGIN = 1.0  # swap two columns once the lower one's log scale is this far above the upper one's
_CLUSTER_GAP = 18.4  # log σ gap beyond which singular values are computed apart (e^{−18.4} = 1e-8)
_ROOT_TOL = 0.1  # the implicit stages' tolerance, a fraction of the step's
_TINY = float(np.finfo(np.float64).tiny)


class FactorizedFlowResult(eqx.Module):
    """The gradient flow of a [`FactorizedModel`][gradflow.FactorizedModel] sampled at rescaled times ``ts``.

    All arrays are NumPy float64. With a batch of ``B`` scales every field but ``ts`` gains a leading axis
    of length ``B``. Tuples hold one entry per weight matrix ``W_j``.

    Attributes:
        ts: rescaled times ``τ = t / log(1/α)``, shape ``(m,)``.
        W: the weight matrices ``W_j = U_j V_jᵀ``, each of shape ``(m, m_j, n_j)``; 0 where below the
            float64 range.
        log_singular_values: the natural log of every singular value of every ``W_j``, shape ``(m, k_j)``,
            descending, exact at every scale (``log α = −1e4`` included).
        loss: ``L``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: the solver's statistics: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps``
            (arrays), ``max_steps`` (the cap it ran under, ``None`` for none) and ``solver`` (``"tsit5"`` or
            ``"kvaerno5"``).
        result: ``"successful"``, ``"max_steps_reached"`` or ``"solver_failed"`` (shape ``()`` or ``(B,)``).
        message: what went wrong, where (``""`` when successful).
    """

    ts: np.ndarray
    W: tuple[np.ndarray, ...]
    log_singular_values: tuple[np.ndarray, ...]
    loss: np.ndarray
    log_alpha: np.ndarray
    stats: dict
    result: np.ndarray
    message: np.ndarray

    @property
    def singular_values(self) -> tuple[np.ndarray, ...]:
        """The singular values of every ``W_j``, shape ``(m, k_j)``; 0 where below the float64 range."""
        return tuple(np.exp(s) for s in self.log_singular_values)

    @property
    def alpha(self) -> np.ndarray:
        """``α``; 0.0 where below the float64 range."""
        return np.exp(self.log_alpha)


class FactorizedGDResult(eqx.Module):
    """Full-batch gradient descent on the factors, recorded every ``record_every`` steps (NumPy float64).

    With ``A`` scales every field but ``steps`` and ``lr`` gains a leading axis of length ``A``.

    Attributes:
        steps: the recorded step numbers, shape ``(m,)``.
        W: the weight matrices ``W_j = U_j V_jᵀ``, each of shape ``(m, m_j, n_j)``.
        loss: ``L``, shape ``(m,)``.
        log_alpha: ``log α``.
        lr: the learning rate.
    """

    steps: np.ndarray
    W: tuple[np.ndarray, ...]
    loss: np.ndarray
    log_alpha: np.ndarray
    lr: float

    @property
    def ts(self) -> np.ndarray:
        """The rescaled times ``τ = step · lr / log(1/α)``."""
        return self.steps * self.lr / -self.log_alpha[..., None]

    @property
    def singular_values(self) -> tuple[np.ndarray, ...]:
        """The singular values of every ``W_j``, descending, shape ``(m, min(m_j, n_j))``."""
        return tuple(np.linalg.svd(w, compute_uv=False) for w in self.W)

    @property
    def log_singular_values(self) -> tuple[np.ndarray, ...]:
        """Their logs, the singular values clipped to the smallest positive float64."""
        return tuple(np.log(np.maximum(s, _TINY)) for s in self.singular_values)


# --------------------------------------------------------------------------------------------------
# The state of one factor, Z = [U; V] = Q diag(e^ρ) R̃, and the vector field.


class _Factor(eqx.Module):
    Q: jax.Array  # (m + n, k), orthonormal columns
    rho: jax.Array  # (k,), log scales
    R: jax.Array  # (k, k), unit upper triangular
    C: jax.Array  # (k, k), the conserved C̄ = C / α² = ZᵀJZ / α² (constant but for the sorting's rotations)


def _weights(f: _Factor, m: int) -> jax.Array:
    """``W = U Vᵀ = Q_t diag(e^ρ) R̃ R̃ᵀ diag(e^ρ) Q_bᵀ`` (0 where below the float64 range)."""
    M = jnp.exp(f.rho)[:, None] * f.R
    return (f.Q[:m] @ M) @ (f.Q[m:] @ M).T


def _imbalance(f: _Factor, log_alpha, m: int) -> jax.Array:
    """``K − QᵀJQ`` with ``K = e^{2 log α} diag(e^{−ρ}) R̃⁻ᵀ C̄ R̃⁻¹ diag(e^{−ρ})``, what ``QᵀJQ`` is by the
    conservation law (docs/math.md). Where ``K`` is below rounding of O(1) numbers, ``Q`` has lost it."""
    k = f.rho.shape[0]
    Rinv = jax.scipy.linalg.solve_triangular(f.R, jnp.eye(k), lower=False, unit_diagonal=True)
    scale = jnp.exp(jnp.minimum(2.0 * log_alpha - f.rho[:, None] - f.rho[None, :], 40.0))  # |K| ≤ 1: never large
    K = scale * (Rinv.T @ f.C @ Rinv)
    Qt, Qb = f.Q[:m], f.Q[m:]
    return 0.5 * (K + K.T) - (Qt.T @ Qt - Qb.T @ Qb)


def _vector_field(t, y: tuple[_Factor, ...], args):
    """``d(Q, ρ, R̃)/dt`` of ``dZ/dt = A Z`` for every factor (the module docstring), in unscaled time, at
    ``Q + δQ``, ``δQ = [Q_t ΔK/2; −Q_b ΔK/2]``, the first-order move that gives ``QᵀJQ`` its exact value
    (``ΔK = _imbalance``); the terms linear in ``δQ`` are added apart, so a ``ΔK`` below rounding still
    drives the flow."""
    del t
    model = args.model
    Gs = model.G(tuple(_weights(f, m) for f, (m, _) in zip(y, model.shapes)))
    out = []
    for f, G, (m, _) in zip(y, Gs, model.shapes):
        dK = _imbalance(f, args.log_alpha, m)
        dQ = jnp.concatenate([f.Q[:m] @ dK, -(f.Q[m:] @ dK)]) * 0.5

        def apply(Q):
            return jnp.concatenate([G @ Q[m:], G.T @ Q[:m]])

        AQ, AdQ = apply(f.Q), apply(dQ)
        B = f.Q.T @ AQ + (dQ.T @ AQ + f.Q.T @ AdQ)
        B = 0.5 * (B + B.T)
        upper = jnp.triu(B, 1)
        T = jnp.diag(jnp.diag(B)) + 2.0 * upper
        E = jnp.exp(jnp.minimum(jnp.triu(f.rho[None, :] - f.rho[:, None], 1), 60.0))  # e^{ρ_j − ρ_i}, bounded if sorted
        dQdt = AQ - f.Q @ T + (AdQ - dQ @ T)
        out.append(_Factor(Q=dQdt, rho=jnp.diag(B), R=(E * 2.0 * upper) @ f.R, C=jnp.zeros_like(f.C)))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# The gauge, fixed after every step: sorted log scales, and QᵀJQ restored from the conserved C.


def _swap(f: _Factor, i) -> _Factor:
    """Exchange the order of columns ``i, i+1`` (docs/math.md): ``Z → Z O`` with the rotation ``O`` that makes
    ``R̃`` triangular again after ``Q``'s columns ``i, i+1`` are swapped; ``W`` does not change."""
    k = f.rho.shape[0]
    r = f.R[i, i + 1]
    s = jnp.sqrt(1.0 + r * r)
    rows = jnp.arange(k)
    # O acts on columns i, i+1 of Z (and of R̃ above row i): (c_i, c_{i+1}) ← (r c_i − c_{i+1}, c_i + r c_{i+1}) / s.
    O = jnp.eye(k).at[i, i].set(r / s).at[i + 1, i].set(-1.0 / s).at[i, i + 1].set(1.0 / s).at[i + 1, i + 1].set(r / s)
    Ri, Rj = f.R[i], f.R[i + 1]
    R = f.R @ O  # rows above i: rotated columns i, i+1
    new_i = jnp.where(rows > i + 1, -s * Rj, 0.0).at[i].set(1.0).at[i + 1].set(-r)
    new_j = jnp.where(rows > i + 1, Ri / s, 0.0).at[i + 1].set(1.0)
    R = R.at[i].set(new_i).at[i + 1].set(new_j)
    rho = f.rho.at[i].set(f.rho[i + 1] - 0.5 * jnp.log1p(r * r)).at[i + 1].set(f.rho[i] + 0.5 * jnp.log1p(r * r))
    Q = f.Q.at[:, i].set(-f.Q[:, i + 1]).at[:, i + 1].set(f.Q[:, i])
    return _Factor(Q=Q, rho=rho, R=R, C=O.T @ f.C @ O)


def _sort(f: _Factor) -> tuple[_Factor, jax.Array]:
    """One pass of adjacent swaps wherever ``ρ_{i+1}`` exceeds ``ρ_i`` by more than ``½ log(1 + R̃_{i,i+1}²)``
    (what the swap moves) plus a margin; returns whether any was made."""

    def body(i, carry):
        f, changed = carry
        r = f.R[i, i + 1]
        do = f.rho[i + 1] - f.rho[i] > 0.5 * jnp.log1p(r * r) + _SWAP_MARGIN
        pick = lambda a, b: jnp.where(do, a, b)
        return jax.tree_util.tree_map(pick, _swap(f, i), f), changed | do

    k = f.rho.shape[0]
    return jax.lax.fori_loop(0, k - 1, body, (f, jnp.array(False)))


def _restore(f: _Factor, log_alpha, m: int) -> _Factor:
    """``Q ← polar([Q_t (I + ΔK/2); Q_b (I − ΔK/2)])``: ``QᵀJQ`` restored from the conserved ``C`` to first
    order (``ΔK = _imbalance``, small after every step) and the columns orthonormal again."""
    dK = _imbalance(f, log_alpha, m)
    eye = jnp.eye(f.rho.shape[0])
    Q = jnp.concatenate([f.Q[:m] @ (eye + 0.5 * dK), f.Q[m:] @ (eye - 0.5 * dK)])
    u, _, vt = jnp.linalg.svd(Q, full_matrices=False)
    return eqx.tree_at(lambda g: g.Q, f, u @ vt)


class _Args(eqx.Module):
    model: FactorizedModel
    log_alpha: jax.Array


class _Gauge(WrappedSolver):
    """Wraps a solver: after each step, sorts the columns and restores ``QᵀJQ`` (the module docstring).

    A step after a swap re-evaluates its first stage, as after a jump: the stored last stage of a
    first-same-as-last method is the vector field in the old gauge.
    """

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args), jnp.array(False)

    def step(self, terms, t0, t1, y0, args: _Args, solver_state, made_jump):
        inner, swapped = solver_state
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, inner, jnp.logical_or(made_jump, swapped)
        )
        factors, any_swap = [], jnp.array(False)
        for f, (m, _) in zip(y1, args.model.shapes):
            f, changed = _sort(f)
            factors.append(_restore(f, args.log_alpha, m))
            any_swap = any_swap | changed
        return tuple(factors), y_error, dense_info, (inner, any_swap), result


# --------------------------------------------------------------------------------------------------
# The solve.


def _inner_solver(name: str, atol: float) -> dfx.AbstractSolver:
    if name == "tsit5":
        return dfx.Tsit5()
    root_finder = dfx.VeryChord(rtol=_ROOT_TOL * atol, atol=_ROOT_TOL * atol, norm=optx.rms_norm)
    return dfx.Kvaerno5(root_finder=root_finder)


@eqx.filter_jit
def _solve(model, y0, log_alpha, ts, rtol, atol, *, solver, max_steps, batched):
    def one(la):
        L = -la
        y = tuple(eqx.tree_at(lambda f: f.rho, f, f.rho + la) for f in y0)  # Z(0) = α Z̄(0)
        args = _Args(model=model, log_alpha=la)
        gauge = _Gauge(_inner_solver(solver, atol + rtol))
        pid = dfx.PIDController(rtol=rtol, atol=atol)
        ys, result, stats = solve_onto(_vector_field, gauge, y, args, ts * L, pid, max_steps)
        Ws = tuple(jax.vmap(lambda f, m=m: _weights(f, m))(f) for f, (m, _) in zip(ys, model.shapes))
        loss = jax.vmap(model.loss_of_weights)(Ws)
        return ys, Ws, loss, result, stats

    return jax.vmap(one)(log_alpha) if batched else one(log_alpha)


def initial_state(us, vs) -> tuple[_Factor, ...]:
    """The state of ``Z(0) = [Ū; V̄]`` at ``α = 1`` (add ``log α`` to ``ρ``), with ``C̄ = ŪᵀŪ − V̄ᵀV̄``, per factor.

    Columns are first ordered by a pivoted QR, so that the log scales start sorted; reordering the columns of
    ``Z`` leaves ``W = U Vᵀ`` unchanged.
    """
    import scipy.linalg

    factors = []
    for u, v in zip(us, vs):
        z = np.concatenate([u, v])
        _, _, perm = scipy.linalg.qr(z, mode="economic", pivoting=True)
        z = z[:, perm]
        q, r = np.linalg.qr(z)
        sign = np.where(np.diag(r) < 0, -1.0, 1.0)
        q, r = q * sign, r * sign[:, None]
        d = np.diag(r)
        m = u.shape[0]
        C = z[:m].T @ z[:m] - z[m:].T @ z[m:]
        factors.append(_Factor(Q=q, rho=np.log(d), R=np.triu(r / d[:, None]), C=C))
    return tuple(factors)


@float64
def rank_flow(
    model: FactorizedModel,
    *,
    ts,
    u0=None,
    v0=None,
    start=None,
    alpha=None,
    log_alpha=None,
    rtol: float = 0.0,
    atol: float = 1e-8,
    max_steps: int | None = None,
    jacobian_rank=None,
    batching: str = "auto",
    throw: bool = True,
    solver: str = "auto",
) -> FactorizedFlowResult:
    """``simulate_flow`` for a [`FactorizedModel`][gradflow.FactorizedModel]: the exact flow from
    ``U_j(0) = α u0[j]``, ``V_j(0) = α v0[j]`` at rescaled times ``ts`` (docs/math.md, *Full weights: the exact
    flow*). ``solver``: ``"tsit5"``, ``"kvaerno5"`` (L-stable, for small α, where the flow is stiff) or
    ``"auto"`` (Kvaerno5 when ``log(1/α) > 2000``; for a batch, when some run's is). ``batching`` as in
    ``simulate_flow``. ``max_steps``: the step cap (``None``: none, as in
    ``simulate_flow``). ``start`` and ``jacobian_rank`` are the diagonal engine's and
    must not be given; the tolerances bound the local error of ``ρ`` (absolute) and of ``Q, R̃`` per step."""
    check_factorized_model(model)
    if start is not None or jacobian_rank is not None:
        raise ValueError("start and jacobian_rank apply to diagonal models only; a FactorizedModel starts from u0, v0.")
    if u0 is None or v0 is None:
        raise ValueError("give the initial factors u0 and v0 (U_j(0) = α u0[j], V_j(0) = α v0[j]).")
    us, vs = check_factors(u0, v0, model)
    log_a, batched = check_scales(alpha, log_alpha)
    ts = check_times(ts)
    max_steps = None if max_steps is None else check_int(max_steps, "max_steps")
    if not (rtol >= 0 and atol >= 0 and rtol + atol > 0):
        raise ValueError(f"rtol and atol must be >= 0 and not both 0; got rtol={rtol!r}, atol={atol!r}.")
    if solver not in _SOLVERS:
        raise ValueError(f"solver must be one of {_SOLVERS}; got {solver!r}.")
    if solver == "auto":
        solver = "kvaerno5" if float(np.max(-log_a)) > _STIFF_LOG else "tsit5"
    y0 = jax.tree_util.tree_map(jnp.asarray, initial_state(us, vs))

    def solve(log_a, batched):
        return _solve(
            model, y0, log_a, jnp.asarray(ts), rtol, atol, solver=solver, max_steps=max_steps, batched=batched
        )

    if batched and not vmap_batches(batching):
        out = solve_separately(lambda j: solve(log_a[j], False), len(log_a))
    else:
        out = solve(jnp.asarray(log_a), batched)
    ys, Ws, loss, solver_result, stats = jax.tree_util.tree_map(np.asarray, out)
    log_sv = tuple(_log_singular_values(f, m) for f, (m, _) in zip(ys, model.shapes))
    dummy_log_w = np.where(np.isfinite(loss), 0.0, np.inf)[..., None]
    result, message = _status(solver_result, dummy_log_w, ts, log_a, max_steps)
    message = np.char.replace(message.astype(str), "simulate_flow", "simulate_flow (factorised model)")
    res = FactorizedFlowResult(
        ts=ts,
        W=Ws,
        log_singular_values=log_sv,
        loss=loss,
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=stats[0],
            num_accepted_steps=stats[1],
            num_rejected_steps=stats[2],
            max_steps=max_steps,
            solver=solver,
        ),
        result=result,
        message=message,
    )
    failed = np.flatnonzero(np.ravel(result) != "successful")
    if throw and failed.size:
        raise RuntimeError(str(np.ravel(message)[failed[0]]))
    return res


# --------------------------------------------------------------------------------------------------
# Log singular values of W = Q_t diag(e^ρ) R̃ R̃ᵀ diag(e^ρ) Q_bᵀ at any scale (NumPy, on the recorded states).


def _log_singular_values(f: _Factor, m: int) -> np.ndarray:
    """``log σ`` of every recorded ``W``, shape ``f.rho.shape`` (descending)."""
    Q, rho, R = (np.asarray(x) for x in (f.Q, f.rho, f.R))
    lead = rho.shape[:-1]
    out = np.empty(rho.shape)
    for idx in np.ndindex(lead):
        out[idx] = _log_sv_one(Q[idx], rho[idx], R[idx], m)
    return out


def _log_sv_one(Q, rho, R, m) -> np.ndarray:
    """``W = F D² Hᵀ`` with ``D = diag(e^ρ)`` and bounded ``F, H`` (docs/math.md): block elimination over clusters
    of log scales more than ``_CLUSTER_GAP`` apart, an SVD within each cluster, in scaled arithmetic."""
    if not np.all(np.isfinite(rho)):
        return np.full(rho.shape, np.nan)
    order = np.argsort(-rho)
    Q, rho, R = Q[:, order], rho[order], R[np.ix_(order, order)]
    K = R @ R.T
    L = np.linalg.cholesky(K)
    Lhat = np.where(np.tri(len(rho), dtype=bool), L * np.exp(np.clip(rho[:, None] - rho[None, :], -745, 0.0)), 0.0)
    F, H = Q[:m] @ Lhat, Q[m:] @ Lhat
    Rf, Rh = np.linalg.qr(F)[1], np.linalg.qr(H)[1]
    up = np.triu(np.ones((len(rho),) * 2, dtype=bool))
    scale = np.exp(np.clip(rho[None, :] - rho[:, None], -745, 0.0))  # e^{ρ_j − ρ_i}, i ≤ j
    N = np.where(up, Rf * scale, 0.0) @ np.where(up, Rh * scale, 0.0).T  # D⁻¹ R_f D (D⁻¹ R_h D)ᵀ
    # clusters: consecutive log scales of σ ≈ e^{2ρ} closer than the gap
    breaks = np.flatnonzero(2.0 * (rho[:-1] - rho[1:]) > _CLUSTER_GAP) + 1
    bounds = [0, *breaks.tolist(), len(rho)]
    logs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a:
            S = N[a:b, a:b] - N[a:b, :a] @ np.linalg.solve(N[:a, :a], N[:a, a:b])
        else:
            S = N[a:b, a:b]
        d = np.exp(rho[a:b] - rho[a])
        sv = np.linalg.svd(d[:, None] * S * d[None, :], compute_uv=False)
        with np.errstate(divide="ignore"):
            logs.append(np.log(sv) + 2.0 * rho[a])
    return np.sort(np.concatenate(logs))[::-1]


# --------------------------------------------------------------------------------------------------
# Gradient descent in float64 on the factors.


@float64
def rank_gd(model: FactorizedModel, *, u0, v0, alpha=None, log_alpha=None, lr: float, steps: int, record_every=1):
    """``simulate_gd`` for a [`FactorizedModel`][gradflow.FactorizedModel]: full-batch gradient descent
    ``(U, V) ← (U, V) − lr ∇L`` in float64 from ``U_j(0) = α u0[j]``, ``V_j(0) = α v0[j]``; ``α`` one scale or
    a 1-D array (trained together). Step ``k`` sits at rescaled time ``τ = k lr / log(1/α)``."""
    check_factorized_model(model)
    us, vs = check_factors(u0, v0, model)
    log_a, batched = check_scales(alpha, log_alpha)
    alphas = np.exp(log_a) if alpha is None else np.asarray(alpha, dtype=np.float64)
    if np.any(alphas < _TINY):
        raise ValueError(
            f"gradient descent trains the factors α (u0, v0) themselves, so α must be a normal float64 number; got "
            f"α = e^{float(np.min(log_a)):.6g}. The exact flow takes any log α: use simulate_flow."
        )
    if not (isinstance(lr, (int, float, np.floating)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number; got {lr!r}.")
    steps, record_every = check_int(steps, "steps"), check_int(record_every, "record_every")
    if steps % record_every:
        raise ValueError(f"steps ({steps}) must be a multiple of record_every ({record_every}).")
    Ws, loss = _gd(
        model,
        tuple(map(jnp.asarray, us)),
        tuple(map(jnp.asarray, vs)),
        jnp.asarray(alphas),
        jnp.asarray(float(lr)),
        jnp.asarray(record_every),
        records=steps // record_every,
        batched=batched,
    )
    rec = np.arange(steps // record_every + 1, dtype=np.int64) * record_every
    return FactorizedGDResult(
        steps=rec, W=tuple(np.asarray(w) for w in Ws), loss=np.asarray(loss), log_alpha=np.array(log_a), lr=float(lr)
    )


@eqx.filter_jit
def _gd(model, us, vs, alphas, lr, every, *, records, batched):
    def one(alpha):
        theta = (tuple(alpha * u for u in us), tuple(alpha * v for v in vs))
        grad = jax.grad(lambda th: model.loss_value(*th))

        def step(_, th):
            return jax.tree_util.tree_map(lambda x, g: x - lr * g, th, grad(th))

        def record(th):
            Ws = tuple(u @ v.T for u, v in zip(*th))
            return Ws, model.loss_of_weights(Ws)

        def chunk(th, _):
            th = jax.lax.fori_loop(0, every, step, th)
            return th, record(th)

        _, recs = jax.lax.scan(chunk, theta, None, length=records)
        first = record(theta)
        return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, recs)

    return jax.vmap(one)(alphas) if batched else one(alphas)
