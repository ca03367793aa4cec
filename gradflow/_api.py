"""The public entry points of the theory engine: the exact flow, discrete training, the greedy limit and their
comparison, for every model family.

Each does the checks that every family shares (scales, output times, tolerances, step caps, learning rates, the
greedy tolerances), looks the family up from the model's type (``gradflow._registry``), calls it, and handles
``throw`` once (``gradflow._results.finish``). Everything runs in gradflow's float64 scope (``gradflow._config``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._config import float64, map_per_core
from ._kit._assumptions import warn
from ._kit._checks import check_int, check_scales, check_times, init_checked
from ._kit._comparison import (
    check_distinct,
    check_options,
    check_windows,
    comparison_scales,
    default_delta,
    default_times,
)
from ._kit._deprecation import renamed_scales
from ._kit._family import FlowRequest
from ._kit._greedy import GreedyTolerances
from ._registry import family_of
from ._results import finish

_TINY = float(np.finfo(np.float64).tiny)


@float64
def simulate_flow(
    model,
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
    batching: str = "auto",
    solver=None,
    progress: bool = False,
    throw: bool = True,
    jacobian_rank: int | None = None,
):
    """Solve the gradient flow from ``θ(0) = α (u0, v0)`` (or from ``start``) exactly, at rescaled times ``ts``.

    Integrates ``d(log w)/dτ = log(1/α) g(β)`` (paper appendix C.3–C.4, eq. 13; docs/math.md, *Rescaled time and
    log coordinates*) with an L-stable implicit method on the plateaus and an explicit order-8 one inside the
    jumps, reading ``ts`` off the dense output (a batch under ``vmap``: the implicit method throughout, stepping
    exactly onto every ``ts``). Works for every scale: ``log_alpha`` may be far below the float64 range (−1e4), and the
    cost barely grows with ``log(1/α)``.

    Args:
        model: the model and data.
        ts: rescaled times ``τ = t / log(1/α)`` from the start, 1-D, increasing, ``ts[0] ≥ 0``.
        u0, v0: initialisation directions, shape ``(p,)``, with ``|u0_i| ≠ |v0_i|`` (Assumption 4.2; a
            near-degenerate gap is an ``AssumptionWarning``, see docs/math.md).
        start: instead of ``u0, v0``, the exact state to start from, e.g. ``flow.state_at(k)``: a
            [`FlowState`][gradflow.FlowState], or a batch of them (solved together, one compilation).
            ``ts`` then counts from that state, and ``α`` sets only the time unit and ``b = log w / log α``;
            ``simulate_flow(model, start=flow.state_at(k), log_alpha=flow.log_alpha, ts=flow.ts[k:] - flow.ts[k])``
            continues ``flow``.
        alpha: the scale, in (0, 1), or a 1-D array of scales (a batch of runs, one compilation; see
            ``batching``); with a batch of start states, one scale per state.
        log_alpha: ``log α`` (< 0) instead of ``alpha``, scalar or 1-D array.
        rtol, atol: the local error of each step in ``log w`` is kept below ``atol + rtol |log w|``.
            ``atol`` is the relative accuracy of the weights ``u, v``; a nonzero ``rtol`` loosens the
            control of sleeping coordinates (``|log w| ≈ b log(1/α)``) and so of the times they wake.
        max_steps: the most solver steps (accepted and rejected) before giving up; ``None`` (the default):
            no cap, the solve runs until ``ts[-1]`` or until it cannot go on (its step size falls below the
            float64 resolution of ``t``, which it reports). Give a number to bound a run's cost: a step costs
            13 evaluations of ``g`` (explicit) or about 20 (implicit) (docs/benchmarks.md).
        batching: how a batch of runs is solved. ``"separate"``: each run alone, as a single run is, as
            many at once as the machine has cores. ``"vmap"``: all together in one vmapped solve, the implicit
            method throughout, in lock-step (every run takes as many steps as the longest) and with the
            Jacobian columns recomputed at every step; it pays only on an accelerator, where the runs of a
            step cost one. ``"auto"`` (the default): ``"vmap"`` on a GPU or TPU, ``"separate"`` on the CPU,
            where it is 24× faster on the dense attention head (docs/benchmarks.md, *Batches of runs on the
            CPU*).
        solver: the solver options of the model's family, an instance of its options class (docs' Vocabulary
            page, *The families*); None: the family's defaults.
        progress: show a progress bar (tqdm, by the rescaled time reached; only for a solve that lasts more than
            a few seconds).
        throw: as in diffrax: raise a ``RuntimeError`` if a run does not reach ``ts[-1]``. With
            ``throw=False`` the result comes back with the failure in ``result`` and ``message``, and
            the state after the time it stopped at is ``+inf``.
        jacobian_rank: deprecated, ``solver=DiagonalSolver(jacobian_rank=...)``.

    Returns:
        A [`FlowResult`][gradflow.FlowResult].

    Raises:
        ValueError: bad shapes, non-finite values, a degenerate ``|u0_i| = |v0_i|`` (or ``−inf`` in a
            start state), α outside (0, 1), both or neither of ``alpha``/``log_alpha``, both or neither
            of ``u0, v0``/``start``, a batch of states and of scales of different sizes, or ``ts`` not
            increasing from ``τ ≥ 0``; a scale or a time that float64 cannot resolve at the tolerances (``log α``
            below ``−2.25e6`` at ``atol = 1e-8`` for diagonal weights, a range that grows with ``atol + rtol`` and
            that each family states for its own state; ``τ log(1/α)`` beyond ``4.5e12``: docs/floating-point.md),
            with the supported range in the message.
        RuntimeError: with ``throw=True``, the solver did not reach ``ts[-1]`` (the message says where it
            stopped and why).
        Interrupted: Ctrl-C (a ``KeyboardInterrupt``, whatever ``throw``): the solve is run in segments of about half
            a second and stops at the end of the one under way; the exception's ``result`` is the flow up to
            where each run got (``result == "interrupted"`` for the runs it stopped, later times ``+inf``).

    Every family solves its own exact flow, from the start in its own layout (``u0, v0`` as above for models with
    diagonal weights; tuples of factors, or the layers' directions in ``u0`` alone, for the others), and returns its
    own flow result with the shared vocabulary; the table of the families (docs' Vocabulary page, *The families*)
    names each one's model, options and results, and their pages the flows' methods and ranges of scales.
    """
    family = family_of(model)
    log_a, batched = check_scales(alpha, log_alpha)
    ts = check_times(ts)
    max_steps = None if max_steps is None else check_int(max_steps, "max_steps")
    family.check_resolved(log_a, ts, rtol=rtol, atol=atol)  # the tolerances' range too
    solver = _solver_options(family, model, solver, jacobian_rank)
    model = _on_device(model)
    request = FlowRequest(ts, u0, v0, start, log_a, batched, rtol, atol, max_steps, batching, progress)
    result = family.flow(model, request, solver)
    return finish(result, throw=throw)


_DEPRECATED_SOLVER_OPTIONS = {"jacobian_rank": ("diagonal", "jacobian_rank"), "solver": ("factorized", "method")}
"""The solver options ``simulate_flow`` took as its own keywords before the families' solver objects (one release):
the keyword, the family it applied to and the field of that family's ``solver_type`` it sets."""


def _solver_options(family, model, solver, jacobian_rank):
    """``solver`` checked to be ``family``'s solver options (the family's defaults if None), or made from a
    deprecated keyword (``jacobian_rank=``, ``solver="leap"``) with a ``DeprecationWarning``."""
    if jacobian_rank is not None and solver is not None:
        raise ValueError("give the solver options once, in solver (jacobian_rank= is deprecated).")
    legacy = [(k, v) for k, v in (("jacobian_rank", jacobian_rank), ("solver", solver)) if v is not None]
    legacy = [(k, v) for k, v in legacy if k != "solver" or isinstance(v, str)]
    if legacy:
        ((keyword, value),) = legacy
        owner, field = _DEPRECATED_SOLVER_OPTIONS[keyword]
        if owner != family.name:
            raise ValueError(f"{keyword} applies to {owner} models only; a {type(model).__name__} does not take it.")
        new = f"solver=gradflow.{family.solver_type.__name__}({field}={value!r})"
        warn(f"simulate_flow({keyword}={value!r}) is deprecated; pass {new}.", DeprecationWarning)
        return family.solver_type(**{field: value})
    if solver is None:
        return family.solver_type()
    if type(solver) is not family.solver_type:
        raise TypeError(
            f"solver must be a gradflow.{family.solver_type.__name__} for a {type(model).__name__}; got "
            f"{type(solver).__name__}."
        )
    return solver


@float64
def simulate_gd(
    model,
    *,
    u0,
    v0=None,
    alpha=None,
    log_alpha=None,
    lr: float,
    steps: int,
    optimizer: str = "gd",
    batch_size: int | None = None,
    seed: int = 0,
    record_every: int = 1,
    throw: bool = True,
):
    """Train ``θ = (u, v)`` from ``θ(0) = α (u0, v0)`` with ``steps`` optimizer steps, in float64.

    Args:
        model: the model and data.
        u0, v0: initialisation directions, shape ``(p,)``, with ``|u0_i| ≠ |v0_i|`` (as in
            [`simulate_flow`][gradflow.simulate_flow]), in the layout of the model's family, as for
            [`simulate_flow`][gradflow.simulate_flow].
        alpha: the scale in (0, 1), or a 1-D array of scales (trained together, vmapped).
        log_alpha: ``log α`` (< 0) instead of ``alpha``, scalar or 1-D array. Gradient descent trains the
            weights themselves, so α must be a normal float64 number (``α ≥ 2.2e-308``, ``log α ≥ −708``).
        lr: the learning rate.
        steps: the number of steps; a multiple of ``record_every``.
        optimizer: ``"gd"`` (full-batch gradient descent, ``θ ← θ − lr ∇L``), ``"sgd"`` (the same on
            minibatches of ``batch_size`` samples drawn without replacement at every step) or
            ``"adam"`` (``optax.adam(lr)``, full batch or minibatches if ``batch_size`` is given).
        batch_size: minibatch size for ``"sgd"`` (required) and ``"adam"`` (optional).
        seed: seeds the minibatches.
        record_every: record ``θ`` and the loss every this many steps (memory stays
            ``O(steps / record_every)``).
        throw: as for [`simulate_flow`][gradflow.simulate_flow]: raise a ``RuntimeError`` if a run diverges (its
            gradient, weights or loss become NaN or infinite; the message gives the step). With ``throw=False`` the
            result comes back with ``result == "non_finite"`` for that run, the step in ``message``, and its records
            after that step NaN.

    Returns:
        The GD result of the model's family (docs' Vocabulary page, *The families*), its ``ts`` in the family's
        rescaled time, ``step · lr · dτ/dt``; a family may take only some optimizers (its page says which).
    """
    family = family_of(model)
    log_a, batched = check_scales(alpha, log_alpha)
    alphas = np.exp(log_a) if alpha is None else np.asarray(alpha, dtype=np.float64)
    if np.any(alphas < _TINY):
        raise ValueError(
            f"simulate_gd trains the weights θ = α (u0, v0) themselves, so α must be a normal float64 number; got "
            f"α = e^{float(np.min(log_a)):.6g} < {_TINY:.3g}. The exact flow takes any log α: use simulate_flow."
        )
    if not (isinstance(lr, (int, float, np.floating)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number; got {lr!r}.")
    steps, record_every = check_int(steps, "steps"), check_int(record_every, "record_every")
    if steps % record_every:
        raise ValueError(f"steps ({steps}) must be a multiple of record_every ({record_every}).")
    result = family.gd(
        model,
        u0=u0,
        v0=v0,
        log_a=log_a,
        alphas=alphas,
        batched=batched,
        lr=lr,
        steps=steps,
        record_every=record_every,
        optimizer=optimizer,
        batch_size=batch_size,
        seed=seed,
    )
    return finish(result, throw=throw, prefix="simulate_gd: ", hint=". Pass throw=False to get the records.")


@float64
def greedy_limit(
    model,
    *,
    u0=None,
    v0=None,
    max_stages: int | None = None,
    tolerances: GreedyTolerances = GreedyTolerances(),
    check_assumptions: bool = True,
    seed: int = 0,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
    throw: bool = True,
):
    """The α → 0 limit of gradient flow from ``α (u0, v0)``: Algorithm 1 of the paper (docs/math.md,
    *Algorithm 1: the greedy limit*).

    Args:
        model: a model of any family; the path is the family's (docs' Vocabulary page, *The families*; its page
            gives its algorithm, e.g. the greedy low-rank limit of full weights, docs/math.md).
        u0, v0: optional initialisation directions. They do not change the path (only ``b^0 = 1``
            enters), but they are checked against Assumption 4.2 (``|u0_i| ≠ |v0_i|``, else a
            ``ValueError`` naming the coordinates; a near-degenerate gap is an ``AssumptionWarning``, as
            for [`simulate_flow`][gradflow.simulate_flow]) and fix the signs of the returned ``u, v`` to
            match the flow from ``α (u0, v0)``.
        max_stages: stop after this many activations (``None``: until ``T = ∞``, which includes a
            loss that has reached zero, since then ``g = 0``).
        tolerances: the thresholds, see :class:`GreedyTolerances`.
        check_assumptions: compute the Hessian of Assumption 4.3 and the perturbed phase-(B) runs
            of Assumption 4.4. The 4.2 checks (ties, leaving coordinates) and the ε → 0 check are
            part of the algorithm and always run.
        seed: seeds the perturbations of Assumption 4.4.
        progress: print one line per stage.
        checkpoint: a file (``.npz``) to keep the finished stages in, written after every stage: a call with the same
            model (its data and ``h``, by a fingerprint), ``tolerances``, ``check_assumptions`` and ``seed`` resumes
            from the stages it keeps, e.g. after Ctrl-C; one with others is refused.
        throw: as in diffrax: raise a ``RuntimeError`` if the path cannot go on: a phase (B) does not reach a
            stationary point, runs off to infinity, or ends where the loss or ``g`` is not finite. With
            ``throw=False`` the path up to that stage comes back, with the failure in ``result`` and ``message``.

    Returns:
        A :class:`GreedyPath`. Assumption failures are recorded in it and emitted as
        :class:`AssumptionWarning`; only a stage that cannot be reached ends the path early: ``result`` is
        ``"phase_b_failed"`` (phase (B) did not reach a stationary point), ``"no_minimiser"`` (the loss falls
        along the ray ``s·β`` from phase (B)'s endpoint: it has no minimiser on the new support, e.g.
        cross-entropy on separable data) or ``"non_finite"`` (the loss or ``g`` is NaN or infinite there).

    Raises:
        ValueError: bad arguments, a degenerate ``u0, v0``, or a loss or ``g`` that is NaN or infinite at
            ``θ⁰ = 0``: ``h`` is not differentiable at zero weights, and the greedy limit does not apply.
        RuntimeError: with ``throw=True``, the path could not go on (see ``Returns``).
        Interrupted: Ctrl-C (a ``KeyboardInterrupt``, whatever ``throw``) while a stage is computed; the
            exception's ``result`` is the path up to the last finished stage (``result == "interrupted"``). Phase
            (B) runs as compiled calls bounded by ``tolerances.max_steps``: Ctrl-C takes effect when the call under
            way returns.

    Ties in eq. (9) (Δ within ``tolerances.tie · T_{k+1}``) are broken towards the lowest coordinate
    index; the other tied coordinates land on ``b ∈ {0, 2}`` too and are activated at the next stages
    at the same time.
    """
    family = family_of(model)
    if not isinstance(tolerances, GreedyTolerances):
        raise TypeError(f"tolerances must be a GreedyTolerances; got {type(tolerances).__name__}.")
    if max_stages is not None:
        max_stages = check_int(max_stages, "max_stages", minimum=0)
    model = _on_device(model)
    path = family.greedy(
        model,
        u0=u0,
        v0=v0,
        max_stages=max_stages,
        tolerances=tolerances,
        check_assumptions=check_assumptions,
        seed=seed,
        progress=progress,
        checkpoint=checkpoint,
    )
    hint = f". Pass throw=False to get the path up to stage {path.num_stages}."
    return finish(path, throw=throw, prefix="greedy_limit: ", hint=hint)


@float64
def compare_limits(
    model,
    *,
    alpha=None,
    log_alpha=None,
    u0,
    v0=None,
    path=None,
    delta: float | None = None,
    ts=None,
    gd=None,
    threshold: float = 0.5,
    flows=None,
    flow_options: Mapping[str, Any] | None = None,
    throw: bool = True,
    **renamed,
):
    """Run the flow at every α (one batched call) and compare it with the greedy limit (docs/math.md, *What the
    comparison measures*).

    Args:
        model: a model of any family; the comparison is the family's (docs' Vocabulary page, *The families*).
        alpha / log_alpha: the initialisation scales, a 1-D array (or one number) of distinct α or ``log α``
            (give one of them; with ``flows``, neither: the flows' own). ``alphas=``/``log_alphas=`` are the
            deprecated names.
        u0, v0: the initialisation direction, ``θ(0) = α (u0, v0)``, checked once for every run as in
            [`simulate_flow`][gradflow.simulate_flow], in the layout of the model's family (a family whose start is
            ``u0`` alone takes no ``v0``).
        path: the greedy limit of ``model`` (``greedy_limit(model, u0=u0, v0=v0)`` if None: the family's path), checked against the model's family and shapes.
        delta: window margin in rescaled time (default :func:`default_delta`); it must leave a recorded time in
            some window.
        ts: rescaled times to record, past the first stage time ``T_1`` (default :func:`default_times`: 1000 points
            up to ``1.25 T_K``, refined around every ``T_k`` down to ``0.01 / log(1/α)`` of the smallest α, so that
            every α's jumps are resolved). A detected stage time whose error is not larger than the spacing of ``ts``
            around it is a ``UserWarning``: that error is the grid's.
        gd: gradient-descent runs to compare as well: a mapping of ``simulate_gd`` options (``lr``
            required; ``steps`` defaults to reaching the last time of ``ts``; ``record_every``
            to about 1000 records), or a sequence of [`Trajectory`][gradflow.Trajectory] (e.g.
            ``GDResult``), one per α in order.
        threshold: the fraction of each loss drop that marks a detected stage time.
        flows: precomputed runs, [`Trajectory`][gradflow.Trajectory] objects (one batched result or one
            per α, e.g. ``FlowResult``), to use instead of running the flow, at the α they record (``alpha`` or
            ``log_alpha``, if given, must list the same, in order); for another family, its flow results, or
            anything with the fields its comparison reads.
        flow_options: more ``simulate_flow`` options (``atol``, ``rtol``, ``max_steps``, ``throw``, ...).
        throw: as for [`simulate_flow`][gradflow.simulate_flow]: raise a ``RuntimeError`` if a run fails (the flows
            and the gradient descents run with this ``throw`` unless ``flow_options`` or ``gd`` say otherwise).
            With ``throw=False`` the comparison comes back with ``result == "run_failed"`` and a ``message`` that
            says which runs are not finite from when (``comparison.gd`` has its own).

    Returns:
        The comparison of the model's family (a [`Comparison`][gradflow.Comparison] for diagonal weights;
        docs' Vocabulary page, *The families*) with a ``result``: ``"successful"``, ``"run_failed"``, or ``"single_scale"`` (one α:
        the distances, but no rates). It keeps the flows (``comparison.runs``) and the greedy limit
        (``comparison.path``): [`gradflow.plot`](api-plot.md) draws them and [`gradflow.report`][gradflow.report]
        writes the report without running anything again.

    Raises:
        ValueError: before any run, for what cannot work: scales given twice, a ``path`` of another model's shapes,
            ``ts`` (or ``gd``'s ``steps``) that end before ``T_1``, a ``delta`` that leaves no recorded time in any
            window.
        TypeError: a ``path`` of another family.
        RuntimeError: with ``throw=True``, a run failed.
    """
    family = family_of(model)
    alpha, log_alpha = renamed_scales(renamed, alpha, log_alpha, who="compare_limits")
    log_alphas, name = comparison_scales(alpha, log_alpha, flows)
    check_distinct(log_alphas, name)
    names = ("alpha", "log_alpha")
    check_options(delta, threshold)
    u0, v0 = family.check_init(model, u0, v0)
    if path is not None:
        family.check_path(model, path)
    if flows is None:  # the flows' scales and times float64 resolves, before the greedy path
        tolerances = {k: (flow_options or {}).get(k, _FLOW_TOLERANCES[k]) for k in _FLOW_TOLERANCES}
        family.check_resolved(log_alphas, None if ts is None else check_times(ts), names=names, **tolerances)
    with init_checked():
        if path is None:
            path = greedy_limit(model, u0=u0, v0=v0)
        times = np.asarray(path.times, dtype=np.float64)
        delta = default_delta(times) if delta is None else float(delta)
        if ts is None:
            unit = family.time_unit(model, float(np.min(log_alphas)))  # how narrow the jumps are in τ
            ts = default_times(times, delta=delta, log_alphas=log_alphas, time_unit=unit)
        else:
            ts = check_times(ts)
        check_windows(times, delta, ts)
        if gd is not None:
            _check_gd_times(gd, log_alphas, _time_units(model, log_alphas), times, delta, float(ts[-1]))
        if flows is None:
            options = dict(dict(throw=throw), **(flow_options or {}))
            flows = simulate_flow(model, u0=u0, v0=v0, ts=ts, log_alpha=log_alphas, **options)
        options = dict(delta=delta, threshold=threshold)
        comparison = family.compare(model, path, flows, log_alphas, method="flow", **options)
        if gd is not None:
            runs = run_gd(model, log_alphas=log_alphas, u0=u0, v0=v0, horizon=float(ts[-1]), options=gd, throw=throw)
            gd_comparison = family.compare(model, path, runs, log_alphas, method="gd", **options)
            gd_comparison = dataclasses.replace(gd_comparison, runs=tuple(runs), path=path)
            comparison = dataclasses.replace(comparison, gd=finish(gd_comparison, throw=throw, prefix=_WHO))
        kept = tuple(flows) if isinstance(flows, (list, tuple)) else flows
        comparison = dataclasses.replace(comparison, runs=kept, path=path)
    return finish(comparison, throw=throw, prefix=_WHO)


def _on_device(model):
    """``model`` with its arrays on the device: the data go there once, not with every compiled call."""
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, model)


_WHO = "compare_limits: "
_FLOW_TOLERANCES = {k: inspect.signature(simulate_flow).parameters[k].default for k in ("rtol", "atol")}


def run_gd(model, *, log_alphas, u0, v0, horizon: float, options, throw: bool = True) -> list:
    """Gradient-descent runs, one per ``log α`` and one per core: ``options`` is a mapping of ``simulate_gd``
    options, or the runs.

    ``steps`` defaults to reaching the rescaled time ``horizon``, ``record_every`` to about 1000 records, ``throw``
    to ``throw``.
    """
    if isinstance(options, Sequence) and not isinstance(options, (str, bytes)):
        return list(options)
    plans = gd_plans(options, _time_units(model, log_alphas), horizon)
    return map_per_core(  # one run per core: each is a serial chain of small XLA calls
        lambda run: simulate_gd(model, log_alpha=float(run[0]), u0=u0, v0=v0, **dict(dict(throw=throw), **run[1])),
        zip(log_alphas, plans),
    )


def _time_units(model, log_alphas) -> list[float]:
    """``dτ/dt`` at every ``log α`` (the family's ``time_unit``): ``τ = step · lr · dτ/dt`` for gradient descent."""
    family = family_of(model)
    return [family.time_unit(model, la) for la in log_alphas]


def gd_plans(options, units, horizon: float) -> list[dict]:
    """The ``simulate_gd`` options of :func:`run_gd` per ``log α`` (``steps`` and ``record_every`` filled in), from
    ``dτ/dt`` at each (``units``)."""
    if not isinstance(options, Mapping) or "lr" not in options:
        raise TypeError("gd must be a mapping of simulate_gd options with at least 'lr', or a sequence of GDResult.")
    lr = float(options["lr"])
    plans = []
    for unit in units:
        opts = dict(options)
        steps = opts.pop("steps", None) or int(math.ceil(horizon / (unit * lr)))
        every = opts.setdefault("record_every", max(1, steps // 1000))
        plans.append(dict(opts, steps=every * int(math.ceil(steps / every))))
    return plans


def _check_gd_times(gd, log_alphas, units, stage_times, delta: float, horizon: float) -> None:
    """Before any run: the times that gradient descent with the options ``gd`` (a mapping) records reach past
    ``T_1`` and into some window, at every α."""
    if isinstance(gd, Sequence) and not isinstance(gd, (str, bytes)):
        return
    for la, unit, opts in zip(log_alphas, units, gd_plans(gd, units, horizon)):
        times = np.arange(0, opts["steps"] + 1, opts["record_every"]) * float(opts["lr"]) * unit
        what = f"gd's times (steps = {opts['steps']}, lr = {float(opts['lr']):g} at log α = {la:.6g})"
        check_windows(stage_times, delta, times, what=what, fix="Give gd more steps, or none (they then reach ts[-1]).")
