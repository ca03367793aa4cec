"""What the greedy limits of every model family share (docs/math.md, *Algorithm 1: the greedy limit* and *Full
weights: the greedy low-rank limit*): the tolerances, the choice of the next activation, the perturbed starts of
Assumption 4.4, how a phase (B) ended, and the loop over stages that records them.

A greedy path is a sequence of immutable records: stage 0, the transition 0 → 1, stage 1, …, and an end that says
why the path stopped. A family supplies its stages and transitions; :func:`run_stages` runs the loop (the end
conditions, the warnings, the progress) and the helpers below turn the records into a path's arrays.
"""

import abc
import dataclasses
import enum
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import numpy as np

from .._config import check_interrupt
from .._results import RESULTS
from . import _checkpoint
from ._assumptions import warn
from ._checks import check_int


@dataclasses.dataclass(frozen=True)
class GreedyTolerances:
    """Every numerical threshold of :func:`greedy_limit`, scale-aware and overridable.

    Gradients are measured against ``G = ‖g(0)‖_∞`` (the first stage's speed, so ``T_1 = 1/G``):
    the only scale the problem has before any coordinate is active, and one that does not shrink as
    the loss goes to zero (a threshold relative to ``‖g(θ^k)‖`` would turn rounding noise at a
    zero-loss stage into spurious stages). Weights are measured against the size of the current
    weights. Defaults, and why:

    Attributes:
        g_zero: ``g_i(θ^k)`` counts as 0 when ``|g_i| ≤ g_zero · G``. A coordinate with a smaller
            gradient would need a time beyond ``1/(g_zero·G) = T_1/g_zero`` to activate, so the
            path treats stage times beyond about ``10⁶ T_1`` as ∞. Must sit well above
            ``stationary`` (the accuracy of g on the support).
        steady: phase (B)'s flow stops once every support coordinate has
            ``|g_i| ≤ steady · |g_{i_k}(θ^k)|`` (relative to the gradient that drives this stage, so the
            start never counts as steady) or is leaving; the endpoint is then polished by Newton's method. ``1e-4`` is well inside Newton's
            basin (quadratic convergence from there) yet reached after a few steps of the slow exponential
            approach.
        stationary: the Newton polish stops at ``max_{i∈S} |g_i| ≤ stationary · G``; θ^{k+1} is then a
            stationary point to about ``stationary·G / λ_min`` in β (λ_min of the β-Hessian on S), far
            below every other threshold. ``1e-10`` is about 10⁶ above float64 rounding of g.
        support: at the end of phase (B) a coordinate with ``|u_i| ≤ support · ‖u‖_∞`` that is shrinking
            (``s_i g_i < 0``) is leaving (paper Lemma D.4) and is dropped (set to exactly 0 before the
            polish); its weight ``≤ 1e-8 ‖β‖`` no longer moves the others. The polish also drops a
            shrinking coordinate of any size whose Newton step would cross 0 (the root on the support
            lies on the boundary ``β_i = 0``): one that leaves with ``g_i → 0`` decays only like
            ``t^{−1/2}`` and is often still above this threshold when the flow is steady.
        epsilons: the ε of eq. (11), relative to the natural size of the new coordinate,
            ``sqrt(|g_{i_k}| / |∂g_{i_k}/∂β_{i_k}|)`` at θ^k (the size at which it would be stationary
            alone; ``max(‖u^k‖_∞, 1)`` if that curvature is 0). The flow is run from each of them; the
            smallest defines θ^{k+1}. Two decades apart, so that a limit that is not reached shows.
        epsilon_agreement: the ε → 0 limit counts as reached when the endpoints from the two smallest
            ε agree to ``epsilon_agreement · ‖u^{k+1}‖_∞`` (and have the same support); else the stage
            is flagged (Assumption 4.4 / eq. 11) and a warning is emitted. Polished endpoints of the
            same basin agree to ~1e-10, different basins differ at O(1).
        tie: two candidates are tied in eq. (9) when their Δ differ by at most ``tie · T_{k+1}``;
            this is reported as an Assumption 4.2 failure. ``1e-6`` is far above the rounding of Δ.
        hessian: Assumption 4.3 holds when the smallest eigenvalue of the restricted Hessian (in
            ``ũ``, with ``v = s ⊙ ũ``) exceeds ``hessian · G``. That Hessian is ``4 D H_β D`` with
            ``D = diag(ũ)`` and has the units of g, so ``G`` is its natural scale (for an orthonormal
            linear model its eigenvalues are ``4|β_i|``).
        perturbation: size of the random relative perturbations of phase (B)'s start for
            Assumption 4.4 (``y ↦ y ⊙ (1 + perturbation·z)``, z ~ N(0, 1) clipped to ±3; the paper's
            appendix A uses perturbations of standard deviation 1e-2).
        perturbations: how many perturbed starts to run per stage (0 disables the 4.4 spread check).
        spread: Assumption 4.4 holds when every perturbed endpoint is within
            ``spread · ‖u^{k+1}‖_∞`` of the unperturbed one.
        ode_tol: the step-size controller's tolerance for phase (B), which is integrated in ``log |u|``: the
            local error of ``log |u|`` per step, i.e. the relative error of the weights. Loose on purpose: the
            endpoint is an attractor, so the trajectory only has to stay in its basin (the ε and perturbation
            checks test exactly that); its last digits come from the Newton polish.
        ode_rtol, ode_atol: the step-size controller's tolerances for phase (B) of the greedy low-rank limit
            (a [`FactorizedModel`][gradflow.FactorizedModel], integrated in the factors themselves): the RMS of a
            step's error against ``ode_atol + ode_rtol · RMS`` of the factors, ``ode_atol`` relative to the larger
            of the current weights and the natural size of the new direction.
        max_steps: the most solver steps (accepted or rejected) one phase (B) may take before it is declared not
            to converge (a phase (B) of the default toy takes 15–40).
        newton_steps: the most Newton steps of the polish (from ``steady`` it takes 2–6, the first ones with the
            matrix the flow kept; for full weights, the steps of a trust-region method, accepted or not: 1–3 where
            the Hessian is well conditioned; on the d = 50 head of the benchmarks, where the flow becomes steady near
            another saddle and the method walks a flat valley from there, 50 to over 130).
    """

    g_zero: float = 1e-6
    steady: float = 1e-4
    stationary: float = 1e-10
    support: float = 1e-4
    epsilons: tuple[float, ...] = (1e-3, 1e-5)
    epsilon_agreement: float = 1e-6
    tie: float = 1e-6
    hessian: float = 1e-6
    perturbation: float = 1e-2
    perturbations: int = 2
    spread: float = 1e-6
    ode_tol: float = 1e-3
    ode_rtol: float = 1e-4
    ode_atol: float = 1e-9
    max_steps: int = 2048
    newton_steps: int = 300

    def __post_init__(self):
        positive = (
            "g_zero",
            "steady",
            "stationary",
            "support",
            "epsilon_agreement",
            "tie",
            "hessian",
            "spread",
            "ode_tol",
            "ode_rtol",
            "ode_atol",
        )
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"GreedyTolerances.{name} must be a positive finite number; got {value!r}.")
        if not self.stationary < self.g_zero:
            raise ValueError(
                f"GreedyTolerances.stationary ({self.stationary}) must be smaller than g_zero ({self.g_zero}): "
                "the gradient on the support must be resolved below what counts as a nonzero gradient."
            )
        eps = tuple(float(e) for e in self.epsilons)
        if len(eps) < 2 or any(not (0 < e < 1) for e in eps) or len(set(eps)) != len(eps):
            raise ValueError(
                f"GreedyTolerances.epsilons needs at least two distinct values in (0, 1); got {self.epsilons!r}."
            )
        object.__setattr__(self, "epsilons", tuple(sorted(eps, reverse=True)))
        check_int(self.perturbations, "GreedyTolerances.perturbations", minimum=0)
        if not 0 < self.perturbation < 1 / 3:
            raise ValueError(f"GreedyTolerances.perturbation must lie in (0, 1/3); got {self.perturbation!r}.")
        for name in ("max_steps", "newton_steps"):
            check_int(getattr(self, name), f"GreedyTolerances.{name}")


def stage_index(times: np.ndarray, tau) -> np.ndarray:
    """The stage ``k`` with ``times[k] ≤ τ < times[k+1]``, vectorised over ``τ ≥ 0``."""
    tau = np.asarray(tau, dtype=np.float64)
    if np.any(~(tau >= 0)):
        raise ValueError("rescaled time τ must be non-negative (and not NaN).")
    return np.searchsorted(times, tau, side="right") - 1


class AbstractGreedyPath(eqx.Module):
    """What every greedy path has: the stage times ``T_0 = 0 < T_1 ≤ … ≤ T_K`` (stage ``k`` holds on
    ``[T_k, T_{k+1})``, ``T_{K+1} = ∞``), the log scales and the loss of every stage, the checks of every stage and
    transition, and why the path ended (``result``, a ``RESULTS`` value: ``"successful"``, ``"max_stages"``,
    ``"phase_b_failed"``, ``"no_minimiser"`` or ``"non_finite"``; ``message``; ``warnings``). The families' paths
    document each field."""

    times: np.ndarray
    b: np.ndarray
    loss: np.ndarray
    final_delta: np.ndarray
    delta_gap: np.ndarray
    runner_up: np.ndarray
    hessian_min_eig: np.ndarray
    stationarity: np.ndarray
    epsilon_discrepancy: np.ndarray
    perturbation_spread: np.ndarray
    assumptions_ok: np.ndarray
    result: str = eqx.field(static=True)
    message: str = eqx.field(static=True)
    warnings: tuple[str, ...] = eqx.field(static=True)

    @property
    def num_stages(self) -> int:
        """``K``, the number of transitions (the path has ``K + 1`` stages)."""
        return int(np.asarray(self.times).shape[0]) - 1

    def stage_at(self, tau) -> np.ndarray:
        """The stage ``k`` with ``T_k ≤ τ < T_{k+1}``, vectorised over ``τ ≥ 0``."""
        return stage_index(self.times, tau)

    def loss_at(self, tau) -> np.ndarray:
        """``L`` at the stage holding τ (the loss staircase), shape ``τ.shape``."""
        return self.loss[self.stage_at(tau)]

    @property
    @abc.abstractmethod
    def speeds(self) -> np.ndarray:
        """How fast the log scales ``b`` fall on each stage, ``−db/dτ``, shaped as ``b``."""

    def b_at(self, tau) -> np.ndarray:
        """The log scales ``b^k − (τ − T_k) · speeds^k`` on the stage ``k`` holding τ (piecewise linear in τ), shape
        ``τ.shape + b.shape[1:]``."""
        tau = np.asarray(tau, dtype=np.float64)
        k = self.stage_at(tau)
        elapsed = (tau - self.times[k]).reshape(tau.shape + (1,) * (np.ndim(self.b) - 1))
        return self.b[k] - elapsed * self.speeds[k]


class Choice(eqx.Module):
    """The winner of paper eq. (9) and the runner-up that Assumption 4.2 compares it with."""

    coordinate: int
    runner_up: int
    gap: float
    tied: np.ndarray


def choose_coordinate(delta: np.ndarray, tie_tol: float) -> Choice:
    """``i_k = argmin Δ`` (eq. 9) with a deterministic tie-break.

    Coordinates whose ``Δ`` lies within ``tie_tol`` of the minimum are *tied*; the winner is the
    lowest index among them, so the choice does not depend on rounding. The runner-up is the best
    coordinate other than the winner (``-1`` and gap ``∞`` if there is none).
    """
    best = float(np.min(delta))
    tied = np.flatnonzero(delta <= best + tie_tol)
    winner = int(tied[0])
    rest = np.where(np.arange(delta.size) == winner, np.inf, delta)
    runner_up = int(np.argmin(rest))
    gap = float(rest[runner_up] - delta[winner])
    if not np.isfinite(rest[runner_up]):
        runner_up, gap = -1, float("inf")
    return Choice(winner, runner_up, gap, tied[1:])


def perturbed_starts(
    start: np.ndarray, mask: np.ndarray, count: int, size: float, rng: np.random.Generator
) -> np.ndarray:
    """``count`` random multiplicative perturbations ``y ⊙ (1 + size·z)`` of phase (B)'s start (Assumption 4.4).

    ``z`` is standard normal clipped to ``[−3, 3]`` (so for ``size < 1/3`` every perturbed start keeps the
    support and the signs of ``start``: it lies in the set ``B(u^k, δ) ∩ R^p_{≥0}`` of Assumption 4.4).
    """
    z = np.clip(rng.standard_normal((count, start.size)), -3.0, 3.0)
    return np.where(mask, start * (1.0 + size * z), 0.0)


# ----------------------------------------------------------------------------------------------
# How a phase (B) ended: the status per row that the compiled phase (B) of every family returns.


class PhaseB(enum.IntEnum):
    """How a run of phase (B) ended."""

    STATIONARY = 0
    MAX_STEPS = 1  # the flow took max_steps without becoming steady
    NOT_STEADY = 2  # the flow reached t1 (or its solver failed) without becoming steady
    NEWTON_FAILED = 3  # Newton's method did not converge or left the sign orthant


_WHY = {
    PhaseB.MAX_STEPS: "the flow took max_steps = {max_steps} solver steps without becoming steady",
    PhaseB.NOT_STEADY: "the flow reached t1 (or its solver failed) without becoming steady",
    PhaseB.NEWTON_FAILED: (
        "Newton's method did not converge, or moved a coordinate that is not leaving out of its sign orthant"
    ),
}


def why(outcome: PhaseB, tol: GreedyTolerances, words: dict[PhaseB, str] | None = None) -> str:
    """How a run of phase (B) that did not end stationary ended, in words: the family's ``words`` for it where given
    (formatted with ``tol``'s fields), else the diagonal family's."""
    return (words or {}).get(outcome, _WHY[outcome]).format(**dataclasses.asdict(tol))


def first_failure(statuses, tol: GreedyTolerances) -> tuple[PhaseB, float]:
    """The first ε whose phase (B) did not end stationary, and how (``STATIONARY`` and the smallest ε if none)."""
    for eps, code in zip(tol.epsilons, statuses):
        if code:
            return PhaseB(int(code)), eps
    return PhaseB.STATIONARY, tol.epsilons[-1]


# ----------------------------------------------------------------------------------------------
# The records and the loop.


@dataclasses.dataclass(frozen=True, kw_only=True)
class Checked:
    """A record's two flags of the assumptions (which ones: see the family's records) and its warnings, in words."""

    ok: tuple[bool, bool] = (True, True)
    warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class End(Checked):
    """Why the path ended; ``ok`` holds the flags of a transition that was started but failed."""

    result: str
    message: str
    final_delta: np.ndarray


def phase_b_failed(
    k: int, what: str, point: str, outcome: PhaseB, epsilon: float, delta, tol, warned, words=None
) -> End:
    """The end of a path whose phase (B) of stage ``k`` (``what`` it was adding) did not reach a ``point``
    (the family's word: a stationary point, a critical point) from ``epsilon``, told in the family's ``words``
    (see :func:`why`); ``warned`` are the transition's warnings so far."""
    message = f"phase (B) of stage {k} ({what}) did not reach a {point}: from ε = {epsilon:g}, "
    message += why(outcome, tol, words)
    return End(
        result=RESULTS.phase_b_failed.value,
        message=message,
        final_delta=delta,
        ok=(not warned, False),
        warnings=tuple(warned),
    )


def limit_checks(
    k: int, discrepancy: float, spread: float, tol: GreedyTolerances, *, ends: str, support: str
) -> tuple[bool, tuple[str, ...]]:
    """Whether the ε → 0 limit of eq. (11) is reached at stage ``k`` and the perturbed starts of Assumption 4.4
    agree, and the warnings where not (``ends``: what phase (B) ends at, ``support``: what two ends can differ in,
    in the family's words)."""
    messages = ()
    if discrepancy > tol.epsilon_agreement:
        messages += (
            f"the ε → 0 limit of eq. (11) is not reached at stage {k}: the {ends} from ε = "
            f"{tol.epsilons[-2]:g} and {tol.epsilons[-1]:g} differ by {discrepancy:.3g} (relative; inf: "
            f"different {support}).",
        )
    if spread > tol.spread:
        messages += (
            f"Assumption 4.4 fails at stage {k}: perturbing phase (B)'s start moves its endpoint by "
            f"{spread:.3g} (relative).",
        )
    return discrepancy <= tol.epsilon_agreement and not spread > tol.spread, messages


class Stop(Exception):
    """Raised while a family makes the record of stage ``k ≥ 1`` that the path cannot hold: :func:`run_stages` ends
    the path before it, with ``result`` and the message (the transition into it reads Assumption 4.4 failed: its
    phase (B) has no endpoint the path can hold)."""

    def __init__(self, result: RESULTS, message: str):
        super().__init__(message)
        self.result = result


def _listed(names: Sequence[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_finite(k: int, loss, gradients, names: Sequence[str], *, symbol: str) -> None:
    """Stage ``k``'s loss and its gradients (one array per name: ``g_i`` per coordinate, ``G_j`` per weight matrix,
    written ``symbol``) are finite; else a ``ValueError`` at stage 0 (the greedy limit cannot start) and
    :class:`Stop` with ``RESULTS.non_finite`` after it, saying which are not."""
    loss = float(loss)
    bad = [name for name, g in zip(names, gradients) if not np.all(np.isfinite(g))]
    if math.isfinite(loss) and not bad:
        return
    what = " and ".join(
        ([f"the loss is {loss}"] if not math.isfinite(loss) else [])
        + ([f"{symbol} = −∇L is NaN or infinite in {_listed(bad)}"] if bad else [])
    )
    if k:
        raise Stop(
            RESULTS.non_finite,
            f"stage {k}: at θ^{k}, where phase (B) ended, {what}: h or the loss is not finite, or not differentiable, "
            "there",
        )
    raise ValueError(
        f"the greedy limit cannot start: at θ⁰ = 0 (zero weights), {what}. The model's h (or its loss) is not finite "
        "or not differentiable at 0, e.g. jnp.linalg.norm, jnp.sqrt(jnp.abs(·)) or jnp.log of the weights. Algorithm 1 "
        "starts from θ⁰ = 0 and needs the gradient there (paper eq. 8; h twice differentiable, Definition 3.1), so "
        "it does not apply to this model; the exact flow starts at α (u0, v0) ≠ 0 and may still be computed with "
        "simulate_flow. To use greedy_limit, make h smooth at 0, e.g. jnp.sqrt(jnp.sum(beta**2) + 1e-30) for a norm."
    )


RAY = (1.01, 2.0, 4.0, 8.0)
"""The scales ``s`` of the weights at which :func:`check_minimiser` evaluates the loss along the ray ``s ↦ s·β``."""


def check_minimiser(k: int, loss: float, loss_along: Callable[[float], float], *, weights: str, support: str) -> None:
    """:class:`Stop` with ``RESULTS.no_minimiser`` when the point of stage ``k`` (its ``weights``, ``β`` or ``W``, on
    its ``support``, with ``loss``) is no minimiser: the loss ``loss_along(s)`` at ``s·β`` falls from ``s = 1`` through
    every ``s`` of :data:`RAY` (strictly up to ``s = 2``; a loss that underflows to 0 stays there).

    A local minimiser ``β*`` on the support has ``L(sβ*) > L(β*)`` for ``s`` near 1, and a square loss, or a
    cross-entropy on data the support does not separate, grows along every ray. A loss that falls at ``s = 1.01``
    and at every doubling tends to its infimum only as ``‖β‖ → ∞`` (cross-entropy on data the support separates):
    phase (B) runs off to infinity, and its endpoint is only where its tolerances stopped it, at a gradient below
    them.
    """
    losses = [float(loss)] + [float(loss_along(s)) for s in RAY]
    if losses[0] > losses[1] > losses[2] >= losses[3] >= losses[4]:
        ray = ", ".join(f"{v + 0.0:.3g}" for v in losses)  # + 0.0: a loss that underflowed to −0 reads 0
        raise Stop(
            RESULTS.no_minimiser,
            f"no minimiser at stage {k}: on the {support} the loss falls along the ray {weights} ↦ s·{weights} (L = "
            f"{ray} at s = 1, {', '.join(f'{s:g}' for s in RAY)}) and tends to its infimum only as ‖{weights}‖ → ∞ "
            "(e.g. cross-entropy on data that the support separates): phase (B) runs off to infinity, and the point "
            "it stopped at is not a stationary point but where the gradient fell below its tolerances",
        )


def check_stage(k: int, loss, gradients, loss_along: Callable[[float], float], *, names, symbol, weights, support):
    """The checks of the point of stage ``k`` before it is recorded: :func:`check_finite`, then (after stage 0)
    :func:`check_minimiser`."""
    check_finite(k, loss, gradients, names, symbol=symbol)
    if k:
        check_minimiser(k, loss, loss_along, weights=weights, support=support)


def emit(messages: Sequence[str]) -> None:
    """Emit ``messages`` as ``AssumptionWarning`` at the user's line."""
    for message in messages:
        warn(message)


_FLAT = (
    "h is flat there, e.g. a ReLU), so the flow from a small initialisation never leaves them: the path has no stage"
)


def run_stages(
    first,
    delta_of: Callable,
    advance: Callable,
    *,
    words: tuple[str, str],
    max_stages: int | None,
    progress,
    checkpoint: _checkpoint.Checkpoint | None = None,
):
    """The loop of Algorithm 1 (and of the greedy low-rank limit) from the stage record ``first``.

    At stage ``k`` the times until each candidate activates are ``delta_of(stage)``; the path ends
    ``"successful"`` when none is finite, or ``"max_stages"`` after ``max_stages`` transitions (``words``: why none
    is finite, and what the transitions are, in the family's words); otherwise ``advance(stage, k, delta)`` returns an :class:`End` (phase (B)
    failed) or ``(transition, next_stage, what)``, ``what`` the progress line's words for the transition, or raises
    :class:`Stop` (the next stage fails :func:`check_stage`), which ends the path.
    Each record's warnings are emitted as it is made. Ctrl-C (a ``KeyboardInterrupt``) while a transition is
    computed ends the path ``"interrupted"`` with the stages finished before it (the entry point then raises
    :class:`~gradflow._results.Interrupted` with it). With a ``checkpoint``, the loop starts from the stages it keeps
    (their warnings emitted again) and keeps every stage it finishes. Returns ``(stages, transitions, end)``.
    """
    done, unit = words
    stages, transitions = checkpoint.start(first, max_stages, progress) if checkpoint else ([first], [])
    for record in [r for pair in zip(stages, transitions + [None]) for r in pair if r is not None]:
        emit(record.warnings)
    while True:
        stage, k = stages[-1], len(transitions)
        delta = delta_of(stage)
        if not np.any(np.isfinite(delta)):
            message = f"T = ∞: {done}"
            if not transitions:  # at θ⁰ = 0 some gradient is finite unless g(0) is exactly 0
                message = f"g(0) = 0: the gradient of the loss vanishes at zero weights ({_FLAT})"
                warn(message, UserWarning)
            return stages, transitions, End(result=RESULTS.successful.value, message=message, final_delta=delta)
        if max_stages is not None and k >= max_stages:
            message = f"stopped after max_stages = {max_stages} {unit} (final_delta holds the next Δ)"
            return stages, transitions, End(result=RESULTS.max_stages.value, message=message, final_delta=delta)
        try:
            check_interrupt()  # Ctrl-C during the stage before (deferred, gradflow._config): stop here
            out = advance(stage, k, delta)
        except Stop as stop:
            out = End(result=stop.result.value, message=str(stop), final_delta=delta, ok=(True, False))
        except KeyboardInterrupt:
            message = (
                f"greedy_limit was interrupted (Ctrl-C) during stage {k + 1}; the {k + 1} stage(s) before it are kept"
            )
            return stages, transitions, End(result=RESULTS.interrupted.value, message=message, final_delta=delta)
        if isinstance(out, End):
            emit(out.warnings)
            return stages, transitions, out
        transition, stage, what = out
        emit(transition.warnings)
        transitions.append(transition)
        emit(stage.warnings)
        stages.append(stage)
        if checkpoint is not None:
            checkpoint.save(stages, transitions)
        if progress:
            print(f"greedy stage {k + 1}: T = {stage.time:.6g}, {what}, loss = {stage.loss:.6g}", flush=True)


def rows(records, name: str, shape=None, dtype=np.float64) -> np.ndarray:
    """The field ``name`` of every record, stacked (reshaped to ``shape``: an empty list keeps its shape)."""
    out = np.asarray([getattr(r, name) for r in records], dtype=dtype)
    return out if shape is None else out.reshape(shape)


def path_checks(stages, transitions, end: End) -> tuple[np.ndarray, tuple[str, ...]]:
    """The ``assumptions_ok`` array ``(K + 1, 3)`` of a path (row k: stage k and the transition out of it) and every
    warning in the order it was emitted (stage 0, transition 0, stage 1, …, stage K, the end)."""
    K = len(transitions)
    stage_ok = rows(stages, "ok", (K + 1, 2), bool)
    out_ok = rows(transitions + [end], "ok", (K + 1, 2), bool)
    ok = np.stack([stage_ok[:, 0] & out_ok[:, 0], stage_ok[:, 1], out_ok[:, 1]], axis=1)
    order = tuple(m for pair in zip(stages, transitions + [end]) for r in pair for m in r.warnings)
    return ok, order
