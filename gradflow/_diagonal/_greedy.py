"""Algorithm 1 of the paper, the greedy limit of a model with diagonal weights (docs/math.md, *Algorithm 1: the
greedy limit*), as a loop over immutable records: a stage θ^k, then the transition k → k+1.

As the initialisation scale α → 0, gradient flow in rescaled time τ = t / log(1/α) follows a
piecewise-constant path of stationary points θ^k = (u^k, v^k), v^k = s^k ⊙ u^k, held on
[T_k, T_{k+1}), while the log-scale weights b = log_α w move linearly (paper Theorem 4.5):

- (A) paper eqs. (8)–(10): ``Δ_k(i) = (b_i^k − 1 + sgn g_i(θ^k)) / g_i(θ^k)`` for coordinates outside
  ``S_k`` with ``g_i ≠ 0`` (else ∞), ``i_k = argmin Δ_k``, ``T_{k+1} = T_k + Δ_k(i_k)``,
  ``b^{k+1} = b^k − g(θ^k) Δ_k(i_k)``; started from ``T_0 = 0``, ``b^0 = 1``, ``θ^0 = 0`` (docs/math.md,
  *The initial log-scale weight*: the paper's pseudocode misprints ``b^0 = 0``).
- (B) paper eq. (11): ``θ^{k+1} = lim_{ε→0} lim_{t→∞} ψ(t, ε)``, ψ the unscaled gradient flow from
  ``θ^k + (ε e_{i_k}, sgn(g_{i_k}) ε e_{i_k})`` (``_phase_b``). The ε → 0 limit is taken by running the flow
  from every ε of ``GreedyTolerances.epsilons`` (one compiled call per stage, flow and Newton together) and
  checking that the endpoints agree; the smallest ε gives θ^{k+1} and the discrepancy is reported. This is
  honest because, when θ^{k+1} is a strict local minimum (Assumption 4.3), the endpoint is locally constant in
  ε: the start is ``O(ε²)`` off the unstable manifold of θ^k along ``e_{i_k}`` (the coupling to ``y_{i_k}`` is
  quadratic), so every small enough ε lands in the same basin, and a disagreement means that the limit (11) is
  not reached at these ε (reported, never hidden).
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax.numpy as jnp
import numpy as np

from .._kit import _checkpoint
from .._kit import _greedy as kit
from .._kit._checks import AHEAD, check_pair
from ._checks import check_init
from ._frame import apply_frame, frame_of
from ._model import DiagonalModel, evaluate_g, where_not_finite
from ._path import GreedyPath
from ._phase_b import Thresholds, g_and_loss, phase_b, reduce_support, restricted_hessian


def greedy(
    model: DiagonalModel, *, u0, v0, max_stages, tolerances, check_assumptions, seed, progress, checkpoint=None
) -> GreedyPath:
    """Algorithm 1 on a diagonal model, once the checks every family shares are done (see ``greedy_limit``).

    ``u0, v0`` do not change the path (only ``b^0 = 1`` enters), but they are checked against Assumption 4.2 and
    fix the signs of the returned ``u, v`` to match the flow from ``α (u0, v0)``. ``checkpoint``: a file that keeps
    the finished stages (``kit.Checkpoint``).
    """
    p = model.p
    swap, sign = np.zeros(p, dtype=bool), np.ones(p)
    check_pair(u0, v0)
    if u0 is not None:
        swap, sign = frame_of(*check_init(u0, v0, p, model.names))
    g0, loss0 = _evaluate(model, np.zeros(p), np.ones(p))
    G = float(np.max(np.abs(g0))) or 1.0  # g(0) = 0: every Δ is ∞; any positive G keeps the thresholds finite
    ctx = _Context(model, tolerances, G, check_assumptions, np.random.default_rng([seed, 4]))
    if checkpoint is not None:
        key = dict(
            model=_checkpoint.fingerprint(model, _probe), tolerances=tolerances, check=check_assumptions, seed=seed
        )
        checkpoint = _checkpoint.Checkpoint(checkpoint, key, ctx.rng)
    return _stack(*_run(ctx, g0, loss0, max_stages, progress, checkpoint), swap, sign)


def _probe(model: DiagonalModel):
    """``g`` and the loss at a fixed generic ``β`` (``kit.fingerprint``)."""
    beta = 0.3 * np.random.default_rng(20260).standard_normal(model.p)
    return _evaluate(model, np.sqrt(np.abs(beta)), np.sign(beta))


@dataclasses.dataclass(frozen=True)
class _Context:
    """What stays fixed during one run of Algorithm 1."""

    model: DiagonalModel
    tol: kit.GreedyTolerances
    G: float  # ‖g(0)‖_∞, the scale of every gradient threshold
    check: bool  # run the checks of Assumptions 4.3 and 4.4
    rng: np.random.Generator  # the perturbations of Assumption 4.4


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Stage(kit.Checked):
    """``θ^k`` and its checks: one row of the stage arrays of :class:`GreedyPath`.

    The weights are held in the frame ``u_n > |v_n|`` of the flow as magnitudes ``y = |u_n|`` and signs
    ``s`` (``v_n = s ⊙ u_n``); ``ok`` is Assumption 4.2 (every coordinate that left on the way in has
    ``g ≠ 0``) and 4.3.
    """

    time: float
    y: np.ndarray
    signs: np.ndarray
    b: np.ndarray
    support: np.ndarray
    g: np.ndarray  # g(θ^k) with the support and |g_i| ≤ g_zero·G set to 0, as Algorithm 1 uses it
    loss: float
    stationarity: float
    hessian_min_eig: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Transition(kit.Checked):
    """Stage ``k → k+1``: phase (A)'s choice and phase (B)'s end; one row of the transition arrays.

    ``ok`` is Assumption 4.2 (no tie in eq. 9) and 4.4 (the ε → 0 limit is reached and the perturbed
    starts agree).
    """

    delta: np.ndarray
    coordinate: int
    sign: bool
    delta_gap: float
    runner_up: int
    epsilon_discrepancy: float
    perturbation_spread: float


@dataclasses.dataclass(frozen=True)
class _Ends:
    """The end of phase (B) (eq. 11) from every ε and the perturbed starts.

    ``outcome`` is that of the first ε whose run failed (then ``epsilon`` is that ε and ``y`` is None),
    else ``STATIONARY`` with ``y = |u^{k+1}|``, the ε discrepancy and the spread of the perturbed runs.
    """

    outcome: kit.PhaseB
    epsilon: float
    y: np.ndarray | None = None
    discrepancy: float = math.nan
    spread: float = math.nan
    not_finite: str = ""  # where the model is not finite on a failed run's way (_not_finite_on_the_way)


def _run(ctx: _Context, g0, loss0, max_stages, progress, checkpoint) -> tuple[list[_Stage], list[_Transition], kit.End]:
    """Algorithm 1 from ``θ^0 = 0``, ``b^0 = 1``, ``T_0 = 0``: the stages, the transitions and the end."""
    p = ctx.model.p
    first = _stage(ctx, 0, 0.0, np.zeros(p), np.ones(p), np.ones(p), np.zeros(p, dtype=bool), g0, loss0, (True, ()))
    delta_of = lambda stage: time_until_active(stage.b, stage.g, ~stage.support)  # noqa: E731
    return kit.run_stages(
        first,
        delta_of,
        partial(_advance, ctx),
        words=_WORDS,
        max_stages=max_stages,
        progress=progress,
        checkpoint=checkpoint,
    )


_WORDS = ("no coordinate off the support has a gradient above g_zero·G, so none activates", "activations")


def _advance(ctx: _Context, stage: _Stage, k: int, delta):
    """Phases (A) and (B) out of ``stage``: the transition ``k → k+1`` and stage ``k + 1`` (with the progress
    line's words), or the end if phase (B) fails."""
    p, names, tol = ctx.model.p, ctx.model.names, ctx.tol
    choice = kit.choose_coordinate(delta, tol.tie * (stage.time + float(np.min(delta))))
    i = choice.coordinate
    tie = ()
    if choice.tied.size:
        tie = (
            f"Assumption 4.2 fails at stage {k}: Δ is tied between {names[i]} and "
            f"{', '.join(names[j] for j in choice.tied)} (gap {choice.gap:.3g}); activating "
            f"{names[i]} (lowest index) first.",
        )
    signs = stage.signs.copy()
    signs[i] = np.sign(stage.g[i])
    ends = _phase_b_ends(ctx, stage, signs, i)
    if ends.outcome is not kit.PhaseB.STATIONARY:
        met = ends.not_finite.replace("{", "{{").replace("}", "}}")
        advice = "check h's domain (e.g. a log or sqrt of the weights)"
        why = f"its flow stopped near a point where the model is not finite: {met}; {advice}"
        words = {ends.outcome: why} if met else None
        return kit.phase_b_failed(
            k, f"activating {names[i]}", "stationary point", ends.outcome, ends.epsilon, delta, tol, tie, words
        )
    transition = _transition(ctx, k, delta, choice, stage.g[i], ends, tie)
    step = float(delta[i])
    b = np.clip(stage.b - stage.g * step, 0.0, 2.0)
    landed = np.concatenate([[i], choice.tied])
    b[landed] = 1.0 - np.sign(stage.g[landed])  # eq. (10): exactly 0 (v takes u's sign) or 2 (v flips)
    support = ends.y > tol.support * np.max(ends.y)
    y = np.where(support, ends.y, 0.0)
    g_raw, loss = _evaluate(ctx.model, y, signs)
    dropped = np.flatnonzero((stage.support | (np.arange(p) == i)) & ~support)
    left = _left(ctx, k + 1, dropped, g_raw, signs)
    following = _stage(ctx, k + 1, stage.time + step, y, signs, b, support, g_raw, loss, left)
    what = f"activated {names[i]}" + (f", left: {_names(names, dropped)}" if dropped.size else "")
    return transition, following, what


def _evaluate(model, y, signs) -> tuple[np.ndarray, float]:
    g, loss = g_and_loss(model, jnp.asarray(signs * y * y))
    return np.asarray(g), float(loss)


def _names(names, idx) -> str:
    return "{" + ", ".join(names[i] for i in idx) + "}"


def _left(ctx: _Context, k: int, dropped, g_raw, signs) -> tuple[bool, tuple[str, ...]]:
    """Assumption 4.2 for the coordinates that left the support on the way into stage ``k``.

    Lemma D.4: a leaving coordinate sits at ``b_j ∈ {0, 2}`` with ``s_j g_j(θ^k) < 0``, and Assumption 4.2
    asks ``g_j(θ^k) ≠ 0``.
    """
    messages = tuple(
        f"Assumption 4.2 fails at stage {k}: {ctx.model.names[j]} left the support with g = {g_raw[j]:.3g} "
        "(needs g ≠ 0 of sign opposite to its weight's sign, Lemma D.4)."
        for j in dropped
        if not (np.abs(g_raw[j]) > ctx.tol.g_zero * ctx.G and signs[j] * g_raw[j] < 0)
    )
    return not messages, messages


def _stage(ctx: _Context, k, T, y, signs, b, support, g_raw, loss, left) -> _Stage:
    """Stage ``k`` at ``θ^k`` (magnitudes ``y``, signs ``s``), with its Assumption 4.3 checks (:class:`kit.Stop` if
    the path cannot hold it, see :func:`kit.check_stage`)."""
    tol, p = ctx.tol, ctx.model.p
    kit.check_stage(
        k,
        loss,
        g_raw,
        lambda s: _evaluate(ctx.model, math.sqrt(s) * y, signs)[1],
        names=ctx.model.names,
        symbol="g",
        weights="β",
        support=f"support {_names(ctx.model.names, np.flatnonzero(support))}",
    )
    ok42, messages = left
    g = np.where(support | (np.abs(g_raw) <= tol.g_zero * ctx.G), 0.0, g_raw)
    stationarity = float(np.max(np.abs(g_raw[support]), initial=0.0) / ctx.G)
    ok43 = True
    if stationarity > tol.stationary:
        ok43 = False
        messages += (
            f"Assumption 4.3 fails at stage {k}: θ^{k} is not a stationary point on its support "
            f"(max |g_i| = {stationarity:.3g}·G after the Newton polish).",
        )
    eig = float("nan")
    if ctx.check:
        red = reduce_support(np.flatnonzero(support), signs, p)
        hess = np.asarray(restricted_hessian(ctx.model, red.index, red.mask, red.signs, jnp.asarray(y[red.index])))
        eig = hessian_min_eig(hess, red.mask)
        if not eig > tol.hessian * ctx.G:
            ok43 = False
            messages += (
                f"Assumption 4.3 fails at stage {k}: the Hessian of L restricted to the support "
                f"{_names(ctx.model.names, np.flatnonzero(support))} has smallest eigenvalue {eig:.3g}, so θ^{k} "
                "is not a strict local minimum.",
            )
    return _Stage(
        time=T,
        y=y,
        signs=signs,
        b=b.copy(),
        support=support.copy(),
        g=g,
        loss=loss,
        stationarity=stationarity,
        hessian_min_eig=eig,
        ok=(ok42, ok43),
        warnings=messages,
    )


def _transition(ctx: _Context, k, delta, choice, g_i, ends: _Ends, tie) -> _Transition:
    """The transition ``k → k+1`` with its Assumption 4.4 and ε → 0 checks."""
    ok44, messages = kit.limit_checks(k, ends.discrepancy, ends.spread, ctx.tol, ends="endpoints", support="supports")
    return _Transition(
        delta=delta,
        coordinate=choice.coordinate,
        sign=bool(g_i > 0),
        delta_gap=choice.gap,
        runner_up=choice.runner_up,
        epsilon_discrepancy=ends.discrepancy,
        perturbation_spread=ends.spread,
        ok=(not tie, ok44),
        warnings=tie + messages,
    )


def _not_finite_on_the_way(model: DiagonalModel, start, end) -> str:
    """Where the model's loss or ``g`` is not finite on the way of a failed phase (B) from ``start`` (β^k) to where it
    ended, ``end``, or just ahead of it along its flow (``dβ/dt = 2 |β| ⊙ g`` on the support: the steps ``AHEAD``),
    in words (:func:`where_not_finite`); ``""`` if nowhere: the flow failed for another reason."""
    with np.errstate(over="ignore", invalid="ignore"):
        line = start + np.linspace(0.0, 1.0, 9)[:, None] * (end - start)
        g = evaluate_g(model, end) if np.all(np.isfinite(end)) else np.zeros_like(end)
        ahead = end * np.exp(2 * AHEAD[:, None] * np.sign(end) * g)
    return where_not_finite(model, np.concatenate([line, ahead]))


def _phase_b_ends(ctx: _Context, stage: _Stage, signs, i) -> _Ends:
    """Phase (B) from every ε (and the perturbed starts), in one compiled call of :func:`_phase_b`.

    Each run is integrated until nearly steady (``tolerances.steady``), its leaving coordinates
    are dropped, and its endpoint is polished by Newton's method on ``g_S(β_S) = 0`` to
    ``tolerances.stationary`` (the flow has already chosen the basin; Newton only removes the
    last digits of the slow approach).
    """
    model, tol, p, y, g_i = ctx.model, ctx.tol, ctx.model.p, stage.y, stage.g[i]
    coords = np.flatnonzero(stage.support | (np.arange(p) == i))
    red = reduce_support(coords, signs, p)
    slot = int(np.flatnonzero(red.index == i)[0])
    base = np.where(red.mask, y[red.index], 0.0)  # y_i = 0: i is not on the support yet
    epsilons = np.asarray(tol.epsilons)
    factors = np.ones((epsilons.size, base.size))
    n_pert = tol.perturbations if ctx.check else 0
    if n_pert:  # perturbations of the start from the largest ε (Assumption 4.4)
        epsilons = np.concatenate([epsilons, np.full(n_pert, epsilons[0])])
        factors = np.concatenate(
            [factors, kit.perturbed_starts(np.ones(base.size), red.mask, n_pert, tol.perturbation, ctx.rng)]
        )
    t1 = 1e6 * (math.log(1.0 / tol.epsilons[-1]) + 1.0) / abs(g_i)
    thresholds = Thresholds(
        *map(
            jnp.asarray,
            (
                abs(g_i),
                tol.steady * abs(g_i),
                tol.support,
                tol.ode_tol,
                1.0 / abs(g_i),
                t1,
                tol.stationary * ctx.G,
            ),
        )
    )
    ends, status, _, _ = phase_b(
        model,
        jnp.asarray(base),
        jnp.asarray(slot),
        jnp.asarray(epsilons),
        jnp.asarray(factors),
        red.index,
        red.mask,
        red.signs,
        thresholds,
        tol.max_steps,
        tol.newton_steps,
    )
    ends, status = np.asarray(ends), np.asarray(status)
    n_eps = len(tol.epsilons)
    outcome, eps = kit.first_failure(status[:n_eps], tol)
    if outcome is not kit.PhaseB.STATIONARY:
        end = np.zeros(p)
        end[red.index[red.mask]] = ends[int(np.argmax(status[:n_eps] != 0))][red.mask] ** 2
        return _Ends(outcome, eps, not_finite=_not_finite_on_the_way(model, signs * y * y, signs * end))
    ref, prev = ends[n_eps - 1], ends[n_eps - 2]
    norm = float(np.max(ref))
    same = np.array_equal(ref > 0, prev > 0)
    disc = float(np.max(np.abs(prev - ref)) / norm) if same else float("inf")
    spread = float("nan")
    if n_pert:
        pert = ends[n_eps:]
        spread = float(np.max(np.abs(pert - ref)) / norm) if np.all(status[n_eps:] == 0) else float("inf")
    y_next = np.zeros(p)
    y_next[red.index[red.mask]] = ref[red.mask]
    return _Ends(outcome, eps, y_next, disc, spread)


def _stack(stages: list[_Stage], transitions: list[_Transition], end: kit.End, swap, sign) -> GreedyPath:
    """The records as the arrays of a :class:`GreedyPath`, the weights mapped out of the flow's frame."""
    K, p = len(transitions), stages[0].y.size
    y, signs = kit.rows(stages, "y", (K + 1, p)), kit.rows(stages, "signs", (K + 1, p))
    u, v = apply_frame(y, signs * y, swap, sign)
    ok, warned = kit.path_checks(stages, transitions, end)
    return GreedyPath(
        times=kit.rows(stages, "time", (K + 1,)),
        u=u,
        v=v,
        beta=signs * y * y,
        b=kit.rows(stages, "b", (K + 1, p)),
        loss=kit.rows(stages, "loss", (K + 1,)),
        g=kit.rows(stages, "g", (K + 1, p)),
        support=kit.rows(stages, "support", (K + 1, p), bool),
        delta=kit.rows(transitions, "delta", (K, p)),
        activated=kit.rows(transitions, "coordinate", (K,), np.int64),
        sign=kit.rows(transitions, "sign", (K,), bool),
        final_delta=np.asarray(end.final_delta, dtype=np.float64),
        delta_gap=kit.rows(transitions, "delta_gap", (K,)),
        runner_up=kit.rows(transitions, "runner_up", (K,), np.int64),
        hessian_min_eig=kit.rows(stages, "hessian_min_eig", (K + 1,)),
        perturbation_spread=kit.rows(transitions, "perturbation_spread", (K,)),
        epsilon_discrepancy=kit.rows(transitions, "epsilon_discrepancy", (K,)),
        stationarity=kit.rows(stages, "stationarity", (K + 1,)),
        assumptions_ok=ok,
        result=end.result,
        message=end.message,
        warnings=warned,
    )


def time_until_active(b: np.ndarray, g: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Paper eq. (8): ``Δ(i) = (b_i − 1 + sgn g_i) / g_i`` for candidates with ``g_i ≠ 0``, else ``∞``.

    ``g`` must already have its numerically-zero entries set to exactly 0.
    """
    active = candidate & (g != 0)
    safe = np.where(active, g, 1.0)
    return np.where(active, (b - 1.0 + np.sign(g)) / safe, np.inf)


def hessian_min_eig(hessian: np.ndarray, mask: np.ndarray) -> float:
    """Smallest eigenvalue on the support block; ``+∞`` for an empty support (vacuously positive-definite)."""
    block = hessian[np.ix_(mask, mask)]
    if block.size == 0:
        return float("inf")
    return float(np.linalg.eigvalsh(0.5 * (block + block.T))[0])
