"""The greedy low-rank limit of gradient flow for factorised weights ``W_j = U_j V_jᵀ`` (Greedy Low-Rank
Learning, Li, Luo & Lyu, ICLR 2021, with stage times in rescaled time; docs/math.md, *Full weights: the
greedy low-rank limit*).

From ``α (U⁰, V⁰)`` as α → 0, the flow in rescaled time ``τ = t / log(1/α)`` holds at saddles
``W̄^k`` (critical points of L on the matrices of ranks ``r^k = (r_1, …, r_J)``) on ``[T_k, T_{k+1})``
and adds one rank to one factor at each ``T_{k+1}``:

- (A) the sleeping directions of factor j have log-scale exponents ``e_{j,1} ≤ … ≤ e_{j,k_j−r_j}`` (all 1
  at τ = 0); on a plateau ``e_{j,i}`` decreases at ``σ_i(G_j(W̄^k))``, ``G_j = −∇_{W_j} L``, except that for a
  square ``W_j`` of full width whose orientation ``sign det W_j`` differs from the saddle's,
  ``sign det(W̄_j^k + G_j)``, the last one increases at ``σ_s`` and turns back at 1 (the conservation law
  forces a shrinking direction there; ``_sleeping``). The factor whose leading exponent reaches 0 first, ``j_k``,
  escapes at ``T_{k+1}``, along the top singular pair ``(a, b)`` of ``G_{j_k}``.
- (B) ``W̄^{k+1} = lim_{ε→0} lim_{t→∞}`` of the unscaled gradient flow of the factors from ``W̄^k`` (balanced
  factors) with a new column ``(ε a, ε b)`` in factor ``j_k`` (``_phase_b``). The ε → 0 limit is checked as
  for diagonal weights: the endpoints from every ε of ``GreedyTolerances.epsilons`` must agree.

Exact for matrix factorisation (``T_r = 1/σ_r(M)``, the saddles are its truncated SVDs) and, for 1×1 weights,
Algorithm 1; for other models the bookkeeping of (A) beyond the first stage rests on a general-position
conjecture (docs/math.md, *Full weights: the greedy low-rank limit*), checked against the exact flow in the
tests.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax.numpy as jnp
import numpy as np

from .._config import map_per_core
from .._kit import _checkpoint
from .._kit import _greedy as kit
from .._kit._checks import AHEAD, check_pair
from .._results import RESULTS
from ._gauge import min_eig_off_gauge
from ._layout import Layout
from ._model import FactorizedModel, check_factors
from ._path import FactorizedGreedyPath
from ._phase_b import RunOff, curvature, evaluate, runs_off, solve_phase_b, where_not_finite
from ._sleeping import escape_times, move, saddle_orientation, signed_rates


def greedy(
    model: FactorizedModel, *, u0, v0, max_stages, tolerances, check_assumptions, seed, progress, checkpoint=None
) -> FactorizedGreedyPath:
    """The greedy low-rank limit of a factorised model, once the checks every family shares are done (see
    ``greedy_limit``).

    ``u0, v0`` (optional, tuples of initial factors) do not change the path: only their genericity enters
    (every sleeping exponent starts at 1); they are checked (shapes, full column rank of ``[U⁰_j; V⁰_j]``).
    ``tolerances`` are those of the diagonal engine, read for matrices: ``g_zero`` (a σ_1(G_j) below
    ``g_zero·G`` is 0), ``support`` (a singular value of W̄_j below ``support·max‖W̄‖`` is not in its rank),
    ``tie`` (two factors' Δ, or σ_1 and σ_2 of G_j, closer than that are a non-unique escape), ``hessian``,
    ``epsilons``/``epsilon_agreement``, ``perturbation(s)``/``spread``, and the ODE and Newton settings.
    ``checkpoint``: a file that keeps the finished stages (``kit.Checkpoint``).
    """
    check_pair(u0, v0)
    if u0 is not None:
        check_factors(u0, v0, model)
    layout = Layout(model.shapes, model.widths)
    G0, loss0 = evaluate(model, tuple(jnp.zeros(s) for s in model.shapes))
    kit.check_finite(0, loss0, G0, model.names, symbol="G")
    G = max(float(np.linalg.norm(np.asarray(g), 2)) for g in G0) or 1.0
    ctx = _Context(model, layout, tolerances, G, check_assumptions, np.random.default_rng([seed, 5]))
    if checkpoint is not None:
        key = dict(
            model=_checkpoint.fingerprint(model, _probe), tolerances=tolerances, check=check_assumptions, seed=seed
        )
        checkpoint = _checkpoint.Checkpoint(checkpoint, key, ctx.rng)
    return _stack(*_run(ctx, max_stages, progress, checkpoint))


def _probe(model: FactorizedModel):
    """``G_j`` and the loss at fixed generic weights (``kit.fingerprint``)."""
    rng = np.random.default_rng(20260)
    return evaluate(model, tuple(jnp.asarray(0.3 * rng.standard_normal(shape)) for shape in model.shapes))


@dataclasses.dataclass(frozen=True)
class _Context:
    model: FactorizedModel
    layout: Layout
    tol: kit.GreedyTolerances
    G: float  # max_j σ_1(G_j(0)), the scale of every gradient threshold (T_1 = 1/G)
    check: bool
    rng: np.random.Generator


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Stage(kit.Checked):
    """``W̄^k`` with its sleeping exponents and checks; ``ok`` = (no rank lost on the way in, local minimum)."""

    time: float
    y: np.ndarray  # balanced factors, flat
    ranks: tuple[int, ...]
    Ws: tuple[np.ndarray, ...]
    exponents: tuple[np.ndarray, ...]  # per factor, ascending, k_j − r_j of them
    rates: tuple[np.ndarray, ...]  # σ_i(G_j), i ≤ k_j − r_j, below g_zero·G set to 0
    signed_rates: tuple[np.ndarray, ...]  # the exponents' speeds on the plateau (_sleeping.signed_rates)
    orientation: tuple[int, ...]  # sign det W_j carried in (0: undefined)
    saddle_orientation: tuple[int, ...]  # sign det(W̄_j + G_j) (0: undefined)
    pairs: tuple[tuple[np.ndarray, np.ndarray], ...]  # top singular pair (a, b) of every G_j
    gaps: tuple[float, ...]  # (σ_1 − σ_2)/σ_1 of every G_j (1 where σ_2 = 0, NaN where σ_1 = 0)
    loss: float
    stationarity: float
    hessian_min_eig: float

    @property
    def delta(self) -> np.ndarray:
        """Time until each factor escapes, the first of its ``escape_times`` (∞ without a sleeping direction or
        speed)."""
        return np.array([np.min(escape_times(e, r), initial=np.inf) for e, r in zip(self.exponents, self.signed_rates)])


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Transition(kit.Checked):
    """``k → k+1``: the escaping factor and the end of phase (B); ``ok`` = (unique escape, ε/perturbations agree)."""

    delta: np.ndarray
    factor: int
    delta_gap: float
    runner_up: int
    singular_gap: float
    epsilon_discrepancy: float
    perturbation_spread: float


def _run(ctx: _Context, max_stages, progress, checkpoint):
    """The greedy low-rank limit from ``W̄^0 = 0`` with every sleeping exponent at 1: stages, transitions, end."""
    layout = ctx.layout
    J, start = len(layout.widths), [np.ones(k) for k in layout.widths]
    first = _stage(ctx, 0, 0.0, np.zeros(layout.size), (0,) * J, start, (0,) * J, (0,) * J, ())
    delta_of = lambda stage: stage.delta  # noqa: E731
    return kit.run_stages(
        first,
        delta_of,
        partial(_advance, ctx),
        words=_WORDS,
        max_stages=max_stages,
        progress=progress,
        checkpoint=checkpoint,
    )


_PHASE_B_WORDS = {  # how a phase (B) of the factors failed, and what to try (kit.why)
    kit.PhaseB.MAX_STEPS: (
        "the flow of the factor columns (U, V) took max_steps = {max_steps} solver steps without becoming steady "
        "(every active column's gradient below steady = {steady:g} of the escape's); raise "
        "GreedyTolerances(max_steps=...)"
    ),
    kit.PhaseB.NOT_STEADY: (
        "the flow of the factor columns (U, V) ran to its time limit (10⁶ escape times) without becoming steady, or "
        "its solver failed; the stage may have no critical point to reach (check the loss is bounded below)"
    ),
    kit.PhaseB.NEWTON_FAILED: (
        "the trust-region Newton polish of the factor columns (U, V) did not bring every active column's relative "
        "gradient to stationary = {stationary:g} (it stopped after newton_steps = {newton_steps} steps or where its "
        "trust region shrank to rounding; the flow had become steady); raise GreedyTolerances(newton_steps=...) or "
        "loosen stationary"
    ),
}
_WORDS = ("no weight matrix has a sleeping direction with σ_1(G_j) above g_zero·G", "escapes")


def _advance(ctx: _Context, stage: _Stage, k: int, delta):
    """The escape out of ``stage`` and its phase (B): the transition ``k → k+1`` and stage ``k + 1`` (with the
    progress line's words), or the end if phase (B) fails."""
    layout, tol, names = ctx.layout, ctx.tol, ctx.model.names
    step = float(np.min(delta))
    choice = kit.choose_coordinate(delta, tol.tie * (stage.time + step))
    j = choice.coordinate
    gap = stage.gaps[j]
    unique = ()
    if choice.tied.size:
        unique += (
            f"the escape at stage {k} is not unique: {names[j]} and {', '.join(names[i] for i in choice.tied)} "
            f"escape together (gap {choice.gap:.3g}); taking {names[j]} (lowest index) first.",
        )
    if gap <= tol.tie:
        unique += (
            f"the escape at stage {k} is not unique: the top singular value of G for {names[j]} is not simple "
            f"((σ_1 − σ_2)/σ_1 = {gap:.3g}).",
        )
    outcome, eps, Ws, ranks, disc, spread, off = _phase_b_ends(ctx, stage, j)
    if off is not None:
        return _no_minimiser(k, names[j], stage.ranks, j, outcome, eps, off, delta, tol, unique)
    if outcome is not kit.PhaseB.STATIONARY:
        what, words = f"a rank for {names[j]}", _PHASE_B_WORDS
        met = _not_finite_on_the_way(ctx.model, stage.Ws, Ws).replace("{", "{{").replace("}", "}}")
        if met:
            advice = "check h's domain (e.g. a log or sqrt of the weights)"
            words = {outcome: f"its flow stopped near a point where the model is not finite: {met}; {advice}"}
        return kit.phase_b_failed(k, what, "critical point", outcome, eps, delta, tol, unique, words)
    ok44, messages = kit.limit_checks(k, disc, spread, tol, ends="saddles", support="ranks")
    transition = _Transition(
        delta=delta,
        factor=j,
        delta_gap=choice.gap,
        runner_up=choice.runner_up,
        singular_gap=gap,
        epsilon_discrepancy=disc,
        perturbation_spread=spread,
        ok=(not unique, ok44),
        warnings=unique + messages,
    )
    exponents, orientation, leaving, lost = _carry(stage, j, step, ranks, names, k)
    y = layout.balanced(Ws, ranks)
    following = _stage(ctx, k + 1, stage.time + step, y, ranks, exponents, orientation, leaving, lost)
    return transition, following, f"rank +1 in {names[j]}"


def _no_minimiser(k: int, name: str, ranks, j: int, outcome, eps: float, off: RunOff, delta, tol, warned) -> kit.End:
    """The end of a path whose phase (B) of stage ``k`` (a rank for ``name``, factor ``j``) failed while its flow ran
    off to infinity (:func:`~gradflow._factorized._phase_b.runs_off`): no minimiser on the new ranks, with the
    evidence."""
    ranks = list(ranks)
    ranks[j] += 1
    points = "; ".join(f"t = {t:.3g}: L = {v:.6g}, ‖(U, V)‖ = {n:.4g}" for t, v, n in zip(off.t, off.loss, off.norm))
    message = (
        f"no minimiser at stage {k}: phase (B) (a rank for {name}, from ε = {eps:g}) runs off to infinity on the "
        f"matrices of ranks {tuple(ranks)}: its flow went down a valley, the loss falling while the factors grew "
        f"without slowing ({points}; growth per unit log t ∝ t^{off.exponent:.2f} by least squares, where a flow converging to a "
        f"critical point slows like t^(−a), a ≥ 1/4 at minima of order ≤ 6), so the loss tends to its infimum only "
        f"as the factors grow without bound, and phase (B) has no endpoint (where it stopped: {kit.why(outcome, tol, _PHASE_B_WORDS)})"
    )
    return kit.End(
        result=RESULTS.no_minimiser.value, message=message, final_delta=delta, ok=(not warned, False), warnings=warned
    )


def _carry(stage: _Stage, j: int, step: float, ranks, names, k: int):
    """(A) from stage k to k+1: every exponent moves at its signed speed for ``step`` (``_sleeping.move``), factor
    j's first to reach 0 is now learned, and a direction that left a factor's rank in phase (B) sleeps again at
    exponent 0, shrinking (it is balanced, as a diagonal coordinate that leaves at b = 0, paper Lemma D.4; an
    extrapolation, reported). Returns the exponents (ascending), orientations, directions leaving, warnings."""
    exponents, orientation = [], []
    for e, r, omega, saddle in zip(stage.exponents, stage.signed_rates, stage.orientation, stage.saddle_orientation):
        moved, omega = move(e, r, step, omega, saddle)
        exponents.append(moved)
        orientation.append(omega)
    exponents[j] = np.delete(exponents[j], np.argmin(escape_times(stage.exponents[j], stage.signed_rates[j])))
    expected = list(stage.ranks)
    expected[j] += 1
    leaving, lost = [0] * len(exponents), ()
    for i, (got, want) in enumerate(zip(ranks, expected)):
        if got < want:
            leaving[i] = want - got
            exponents[i] = np.concatenate([np.zeros(want - got), exponents[i]])
            lost += (
                f"{names[i]} lost {want - got} rank(s) in phase (B) of stage {k}; the log-scale bookkeeping lets the "
                "leaving direction shrink from exponent 0 at the smallest speed, an extrapolation of the diagonal case.",
            )
    return [np.sort(e) for e in exponents], tuple(orientation), tuple(leaving), lost


def _stage(ctx: _Context, k: int, time: float, y, ranks, exponents, orientation, leaving, lost) -> _Stage:
    """Stage k at the balanced factors ``y``: gradients, the sleeping directions' signed speeds (``leaving[j]``
    of factor j's left its rank in phase (B); ``orientation`` carried in), stationarity and the local-minimum
    check (``lost``: the warnings about ranks lost on the way in)."""
    tol, layout = ctx.tol, ctx.layout
    Ws = tuple(np.asarray(w) for w in layout.products(y))
    G, loss = evaluate(ctx.model, tuple(jnp.asarray(w) for w in Ws))
    kit.check_stage(
        k,
        loss,
        G,
        lambda s: evaluate(ctx.model, tuple(jnp.asarray(s * w) for w in Ws))[1],
        names=ctx.model.names,
        symbol="G",
        weights="W",
        support=f"matrices of ranks {tuple(ranks)}",
    )
    rates, signed, saddles, pairs, gaps, residual = [], [], [], [], [], 0.0
    for g, w, r, k_j, e, omega, n_lost in zip(G, Ws, ranks, layout.widths, exponents, orientation, leaving):
        g = np.asarray(g)
        a, s, bt = np.linalg.svd(g)
        s = np.where(s > tol.g_zero * ctx.G, s, 0.0)
        rates.append(s[: k_j - r] if k_j > r else np.zeros(0))
        saddles.append(saddle_orientation(w, g, rates[-1]) if w.shape == (k_j, k_j) else 0)
        signed.append(signed_rates(e, rates[-1], omega, saddles[-1], n_lost))
        pairs.append((a[:, 0], bt[0]))
        gaps.append(float((s[0] - (s[1] if s.size > 1 else 0.0)) / s[0]) if s[0] > 0 else math.nan)
        p, _, qt = np.linalg.svd(w)
        left, right = p[:, :r], qt[:r].T
        off = g - (g - left @ (left.T @ g)) @ (np.eye(g.shape[1]) - right @ right.T)  # P_T(G)
        residual = max(residual, float(np.linalg.norm(off, 2)))
    stationarity = residual / ctx.G
    messages, ok_min = lost, True
    if stationarity > tol.stationary:
        ok_min = False
        messages += (
            f"W̄^{k} is not a critical point at its ranks: ‖P_T(G)‖ = {stationarity:.3g}·G after Newton's method.",
        )
    eig = math.inf if sum(ranks) == 0 else math.nan
    if ctx.check and sum(ranks):
        eig = min_eig_off_gauge(ctx.model, layout, y, ranks)
        if not eig > tol.hessian * ctx.G:
            ok_min = False
            messages += (
                f"W̄^{k} is not a strict local minimum at ranks {tuple(ranks)}: the Hessian in the factors has "
                f"smallest eigenvalue {eig:.3g} off the gauge directions.",
            )
    return _Stage(
        time=time,
        y=y,
        ranks=tuple(ranks),
        Ws=Ws,
        exponents=tuple(exponents),
        rates=tuple(rates),
        signed_rates=tuple(signed),
        orientation=tuple(orientation),
        saddle_orientation=tuple(saddles),
        pairs=tuple(pairs),
        gaps=tuple(gaps),
        loss=float(loss),
        stationarity=stationarity,
        hessian_min_eig=eig,
        ok=(not lost, ok_min),
        warnings=messages,
    )


def _not_finite_on_the_way(model, start, end) -> str:
    """Where the model's loss or ``G`` is not finite on the way of a failed phase (B) from the weights ``start``
    (``W̄^k``) to those where it ended, ``end``, or just ahead of them along ``G`` (the steps ``AHEAD``), in words
    (:func:`~gradflow._factorized._phase_b.where_not_finite`); ``""`` if nowhere."""
    with np.errstate(over="ignore", invalid="ignore"):
        points = [tuple(a + s * (b - a) for a, b in zip(start, end)) for s in np.linspace(0.0, 1.0, 9)]
        if all(np.all(np.isfinite(w)) for w in end):
            G, _ = evaluate(model, tuple(jnp.asarray(w) for w in end))
            points += [tuple(w + h * np.asarray(g) for w, g in zip(end, G)) for h in AHEAD]
    return next(filter(None, (where_not_finite(model, ws) for ws in points)), "")


def _phase_b_ends(ctx: _Context, stage: _Stage, j: int):
    """Phase (B) into factor j from every ε, then, if each ended stationary, from the perturbed starts (each set one
    run per core). Returns (outcome, ε, y, ranks, disc, spread, run-off): the last, where phase (B) failed and its flow
    ran off to infinity (:func:`~gradflow._factorized._phase_b.runs_off`), the evidence, else None; where phase (B)
    failed, ``y`` is where the failed run ended (its weight matrices)."""
    tol, layout, model = ctx.tol, ctx.layout, ctx.model
    a, b = stage.pairs[j]
    sigma = float(stage.rates[j][0])
    directions = tuple(jnp.asarray(np.outer(a, b) if i == j else np.zeros_like(w)) for i, w in enumerate(stage.Ws))
    bend = abs(float(curvature(model, tuple(jnp.asarray(w) for w in stage.Ws), directions)))
    scale_now = float(np.max(np.abs(stage.y), initial=0.0))
    natural = math.sqrt(sigma / bend) if bend > 0 else max(scale_now, 1.0)
    scale = max(scale_now, natural)
    ranks = list(stage.ranks)
    column = ranks[j]
    ranks[j] += 1
    mask = layout.mask(ranks)
    starts = []
    for eps in tol.epsilons:
        factors = [(u.copy(), v.copy()) for u, v in layout.split(stage.y)]
        factors[j][0][:, column] = eps * natural * a
        factors[j][1][:, column] = eps * natural * b
        starts.append(layout.flat(factors))
    starts = np.array(starts)
    n_pert = tol.perturbations if ctx.check else 0
    if n_pert:
        starts = np.concatenate([starts, kit.perturbed_starts(starts[0], mask, n_pert, tol.perturbation, ctx.rng)])
    t1 = 1e6 * (math.log(1.0 / tol.epsilons[-1]) + 1.0) / sigma
    thresholds = tuple(
        jnp.asarray(x)
        for x in (
            tol.steady * sigma,
            tol.stationary * ctx.G,
            tol.support,
            tol.ode_rtol,
            tol.ode_atol * scale,
            t1,
            1.0 / sigma,
            ctx.G,
        )
    )

    def solve(start):
        end, code, _, record = solve_phase_b(
            model, layout, jnp.asarray(start[None]), jnp.asarray(mask), thresholds, tol.max_steps, tol.newton_steps
        )
        return np.asarray(end)[0], int(np.asarray(code)[0]), np.asarray(record)[0]

    # The runs are independent: one per core, the ε first; a failure among them ends the path, so the perturbed
    # starts run only after every ε has ended stationary.
    n_eps = len(tol.epsilons)
    ends, status, records = (list(x) for x in zip(*map_per_core(solve, starts[:n_eps])))
    outcome, eps = kit.first_failure(status, tol)
    if outcome is not kit.PhaseB.STATIONARY:
        failed = tol.epsilons.index(eps)
        return outcome, eps, layout.products(ends[failed]), None, math.nan, math.nan, runs_off(records[failed])
    for end, code, record in map_per_core(solve, starts[n_eps:]):
        ends.append(end)
        status.append(code)
        records.append(record)
    products = [layout.products(e) for e in ends]
    size = max(float(np.linalg.norm(w, 2)) for w in products[n_eps - 1])
    found = [_ranks(ws, size, tol.support) for ws in products]

    def distance(i):
        if found[i] != found[n_eps - 1]:
            return math.inf
        return max(float(np.linalg.norm(p - q, 2)) for p, q in zip(products[i], products[n_eps - 1])) / size

    disc = distance(n_eps - 2)
    spread = math.nan
    if n_pert:
        spread = max(distance(i) if status[i] == 0 else math.inf for i in range(n_eps, len(ends)))
    return outcome, eps, products[n_eps - 1], found[n_eps - 1], disc, spread, None


def _ranks(Ws, size: float, support: float) -> tuple[int, ...]:
    """Numerical ranks: singular values above ``support · size``."""
    return tuple(int(np.sum(np.linalg.svd(w, compute_uv=False) > support * size)) for w in Ws)


def _stack(stages, transitions, end: kit.End) -> FactorizedGreedyPath:
    K, J = len(transitions), len(stages[0].ranks)
    k_max = max(len(e) for e in stages[0].exponents)

    def padded(name):
        out = np.full((K + 1, J, k_max), np.nan)
        for s, stage in enumerate(stages):
            for j, values in enumerate(getattr(stage, name)):
                out[s, j, : len(values)] = values
        return out

    ok, warned = kit.path_checks(stages, transitions, end)
    sigma = np.array([[r[0] if r.size else 0.0 for r in stage.rates] for stage in stages])
    return FactorizedGreedyPath(
        times=kit.rows(stages, "time"),
        activated=kit.rows(transitions, "factor", (K,), np.int64),
        ranks=kit.rows(stages, "ranks", (K + 1, J), np.int64),
        W=tuple(np.stack([stage.Ws[j] for stage in stages]) for j in range(J)),
        loss=kit.rows(stages, "loss"),
        sigma=sigma,
        b=padded("exponents"),
        rates=padded("signed_rates"),
        orientation=kit.rows(stages, "orientation", (K + 1, J), np.int64),
        saddle_orientation=kit.rows(stages, "saddle_orientation", (K + 1, J), np.int64),
        delta=kit.rows(transitions, "delta", (K, J)),
        final_delta=np.asarray(end.final_delta, dtype=np.float64),
        delta_gap=kit.rows(transitions, "delta_gap", (K,)),
        runner_up=kit.rows(transitions, "runner_up", (K,), np.int64),
        singular_gap=kit.rows(transitions, "singular_gap", (K,)),
        hessian_min_eig=kit.rows(stages, "hessian_min_eig"),
        stationarity=kit.rows(stages, "stationarity"),
        epsilon_discrepancy=kit.rows(transitions, "epsilon_discrepancy", (K,)),
        perturbation_spread=kit.rows(transitions, "perturbation_spread", (K,)),
        assumptions_ok=ok,
        result=end.result,
        message=end.message,
        warnings=warned,
    )
