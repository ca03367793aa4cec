"""The greedy low-rank limit of a deep linear network (L ≥ 3) as α → 0 (docs/deep-linear.md, *The greedy limit*):
Li, Luo & Lyu's greedy low-rank learning (ICLR 2021; InRank §3) in the rescaled time ``τ = t α^{L−2}``.

Stage ``k`` holds a rank-``k`` stationary point ``W^k`` of the balanced layers (``W^0 = 0``). Stage ``k + 1`` adds a
singular pair ``(u, v)`` of ``G_k = −∇L(W^k)`` to balanced factors of ``W^k`` at a small per-layer scale and runs
the layers' flow (phase (B)) to the rank-``(k+1)`` stationary point ``W^{k+1}``. Every stage time comes from the
α-free flow of the sleeping layers:

- on plateau ``k`` the layers are ``A^k + α S``: ``A^k`` balanced layers of ``W^k``, and ``S``, the sleeping layers in
  units of α, held off the learned subspaces ``Q_h`` of every space ``h = 0 … L`` (input, hidden, output; the other
  blocks of ``S`` relax at rates ``O(1)`` in ``t`` and vanish as α → 0). ``S`` obeys the α-free
  ``dS_l/dτ = S_{>l}ᵀ G_k S_{<l}ᵀ``, which keeps it off the ``Q_h`` (``G_k`` is: ``U_kᵀ G_k = 0 = G_k V_k``), and
  blows up after ``Δ`` along a balanced rank-one direction ``b_l b_{l−1}ᵀ`` (``u = b_L``, ``v = b_0``: a singular
  pair of ``G_k``, not necessarily the top one). Written ``S = e^ρ Θ``, ``‖Θ‖ = 1``, in the time ``ds = e^{(L−2)ρ} dτ``
  it is the bounded flow ``dΘ/ds = F(Θ) − ⟨Θ, F(Θ)⟩Θ``, ``dρ/ds = ⟨Θ, F(Θ)⟩`` and ``Δ = ∫_0^∞ e^{−(L−2)ρ} ds``. At
  ``k = 0`` this is Jacot et al.'s first escape (2021), from ``S = W0``.
- what is left of ``S`` at the escape, off the ``b_h``, passes the jump unchanged (the jump is ``O(α^{L−2})`` wide
  in τ) and is projected off the new learned subspaces of ``A^{k+1}``, phase (B)'s end from ``A^k + e b_l b_{l−1}ᵀ``
  in the same hidden coordinates. Checked against the exact flow (tests/deep_linear/test_greedy.py): on a Gaussian
  start the flow's stage times approach every ``T_k`` like α.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import numpy as np

from .._config import check_interrupt
from .._kit import _checkpoint
from .._kit._assumptions import warn
from .._kit._greedy import AbstractGreedyPath, GreedyTolerances
from .._results import RESULTS
from ._gauge import min_eig_off_gauge
from ._jump import carry, jump_from, narrow_shapes, phase_b, start_scale
from ._model import (
    DeepLinearModel,
    _pack,
    check_layers,
    flat_jacobian,
    product,
)
from ._sleeping import escape, learned_frames, off_frames


class DeepLinearGreedyPath(AbstractGreedyPath):
    """The greedy low-rank limit of a deep linear network: stages ``k = 0..K`` (stage ``k`` holds ``W^k``, of rank
    ``k``, on ``[T_k, T_{k+1})`` in ``τ = t α^{L−2}``).

    Attributes:
        times: ``(K+1,)`` ``T_0 = 0 < T_1 ≤ … ≤ T_K``.
        W: ``(K+1, m, n)`` the stationary points ``W^k`` (``W^0 = 0``).
        b: ``(K+1, rank)`` the limit of ``log σ / (L log α)`` on each plateau: 0 for the ``k`` learned singular
            values, 1 for the sleeping ones (it does not move within a plateau for ``L ≥ 3``).
        gradient_singular_values: ``(K+1, min(m, n))`` the singular values of ``G_k = −∇L(W^k)``.
        delta: ``(K,)`` ``T_{k+1} − T_k``; delta_gap: ``(K,)`` the runner-up's lag: after the escape out of stage
            ``k``, the time what is left of ``S`` would take to escape under the same ``G_k``, over ``Δ`` (near 0: two
            directions escape together, and which is learned first is fragile).
        loss: ``(K+1,)`` ``L(W^k)``; stationarity: ``(K+1,)`` ``max |W_{>l}ᵀ G W_{<l}ᵀ|`` at the layers of ``W^k``
            over ``σ_1(G_0)``; epsilon_discrepancy: ``(K,)`` ``‖W^{k+1}(ε_1) − W^{k+1}(ε_2)‖ / ‖W^{k+1}‖`` of phase (B)
            from the two smallest ε of the tolerances.
        hessian_min_eig: ``(K+1,)`` the smallest eigenvalue of the Hessian of ``L(W_L ⋯ W_1)`` in the layers at the
            balanced layers of ``W^k``, on the rank-``k`` stratum (the entries of their first ``k`` hidden
            coordinates) and off the gauge ``W_l ↦ M_l W_l M_{l−1}^{−1}`` (gradflow/_deep_linear/_gauge.py): positive
            exactly when ``W^k`` is a strict local minimum of ``L`` on the rank-``k`` matrices (Assumption 4.3, read
            for matrices); for ``½‖W − M‖²`` at its truncations ``s_k^{(L−2)/L}(s_k − s_{k+1})``. ``∞`` at
            ``W^0 = 0``; NaN: not run (``check_assumptions=False``).
        perturbation_spread: ``(K,)`` the largest ``‖W(p) − W^{k+1}‖ / ‖W^{k+1}‖`` over phase (B) from
            ``tolerances.perturbations`` perturbed starts (:func:`perturbed_layers` of the start at the larger ε;
            Assumption 4.4); NaN: not run.
        assumptions_ok: ``(K+1, 3)`` per stage ``k``: the escape out of it is unique (4.2: the runner-up's relative
            gap above ``tolerances.tie``), ``W^k`` is a strict local minimum (4.3: ``hessian_min_eig`` above
            ``tolerances.hessian · σ_1(G_0) · σ_1(W^k)^{(L−2)/L}``, the layers' Hessian having the units of ``G``
            times the layers' size to the ``L − 2``), and phase (B) out of it ends at one point (4.4: the ε
            discrepancy within ``epsilon_agreement`` and the spread within ``spread``); a check not run reads true.
            Each failure is also an ``AssumptionWarning`` (those of 4.3 once the path is done).
        final_delta: ``(1,)`` after ``max_stages``, the next Δ (the α-free flow of what sleeps); ∞ otherwise.
        runner_up, result, message, warnings: as for the other families' paths.
    """

    W: np.ndarray
    gradient_singular_values: np.ndarray
    delta: np.ndarray
    depth: int = eqx.field(static=True)

    @property
    def weights(self) -> np.ndarray:
        """``W^k``, ``(K+1, m, n)``, as ``DeepLinearFlowResult.weights``."""
        return self.W

    def weights_at(self, tau) -> np.ndarray:
        """``W^k`` of the stage holding τ (piecewise constant), shape ``τ.shape + (m, n)``."""
        return self.W[self.stage_at(tau)]

    def singular_values_at(self, tau) -> np.ndarray:
        """The ``rank`` largest singular values of ``W^k`` of the stage holding τ, shape ``τ.shape + (rank,)``."""
        sv = np.linalg.svd(self.W, compute_uv=False)[:, : np.shape(self.b)[-1]]
        return sv[self.stage_at(tau)]

    @property
    def speeds(self) -> np.ndarray:
        """0: the limit of ``b`` is constant on every plateau at ``L ≥ 3``."""
        return np.zeros_like(self.b)


@eqx.filter_jit
def _gradient(model, W):
    return model.G(W)


def _probe(model):
    """The loss and ``G`` at a fixed generic ``W`` (``_checkpoint.fingerprint``)."""
    W = jax.numpy.asarray(0.3 * np.random.default_rng(20260).standard_normal(model.shape))
    return model.loss_of_weights(W), _gradient(model, W)


def balanced_layers(W: np.ndarray, rank: int, shapes, extra=None):
    """Balanced layers of the given ``shapes`` holding ``W``'s top ``rank`` singular triples plus ``extra = (u, σ, v)``
    in their first ``r`` hidden coordinates: ``W_1 = Σ^{1/L} Vᵀ``, ``W_l = Σ^{1/L}``, ``W_L = U Σ^{1/L}``
    (``W_{l+1}ᵀW_{l+1} = W_l W_lᵀ``), zero elsewhere (zero rows and columns stay zero under the flow)."""
    U, s, Vt = np.linalg.svd(W)
    U, s, V = U[:, :rank], s[:rank], Vt[:rank].T
    if extra is not None:
        u, sigma, v = extra
        U, s, V = np.column_stack([U, u]), np.append(s, sigma), np.column_stack([V, v])
    root, r = s ** (1.0 / len(shapes)), s.size
    blocks = [root[:, None] * V.T] + [np.diag(root) for _ in range(len(shapes) - 2)] + [U * root]
    layers = [np.zeros(shape) for shape in shapes]
    layers[0][:r], layers[-1][:, :r] = blocks[0], blocks[-1]
    for layer, block in zip(layers[1:-1], blocks[1:-1]):
        layer[:r, :r] = block
    return layers


CARRY_RTOL = 1e-8
"""The greedy limit runs phase (B) from its smallest ε at this ``ode_rtol`` (or its own, if tighter) and carries the rest
through each jump along it (the rest lives in that run's hidden coordinates): along its phase (B) at the
default ``ode_rtol = 1e-4`` the rotated task's stage times (L = 3) moved 1.8e-3 off the exact flow's; at 1e-8 they are
within 1.1e-7 of the small-α path's, where the rest projected through the jumps left them 1.1e-6 off
(docs/deep-linear.md, *Between the two ranges*)."""


def _last_jump(model: DeepLinearModel, A, k: int, out, G, eps: float, scale: float, tol: GreedyTolerances):
    """Phase (B) out of stage ``k`` from the smallest ``eps``, at :data:`CARRY_RTOL`, with the sleeping layers carried
    along it (:func:`~gradflow._deep_linear._jump.carry`): ``(layers, rest, stationarity, converged, None)``. If it
    does not settle, phase (B) at the greedy limit's own tolerance, the rest projected, and a warning saying so."""
    tight = dataclasses.replace(tol, ode_rtol=min(tol.ode_rtol, CARRY_RTOL), ode_atol=min(tol.ode_atol, CARRY_RTOL))
    layers, stationarity, ok, jump = jump_from(model, A, k, out, G, eps, scale, tight, dense=True)
    if ok:
        rest, failure = carry(model, jump, out.rest, tight)[1:]
        if not failure:
            return layers, rest, stationarity, True, None
        why = f"the sleeping layers' linearised flow along it failed ({failure})"
    else:
        why = f"it did not settle within {tol.max_steps} steps (raise max_steps)"
        layers, stationarity, ok, _ = jump_from(model, A, k, out, G, eps, scale, tol)
    warning = (
        f"stage {k + 1}: the sleeping layers could not be carried through the jump along phase (B) at ode_rtol = "
        f"{tight.ode_rtol:g}: {why}. They are projected instead, which is off where the jump turns the learned "
        "subspaces"
    )
    return layers, out.rest, stationarity, ok, warning


def _phase_b_start(model: DeepLinearModel, W, k: int, pair, G, eps: float):
    """Phase (B)'s start from ``W^k`` (rank ``k``) with the pair ``(u, v)`` of ``G`` at ``ε``, in hidden width
    ``k + 1`` (the flow keeps the layers there: gradflow/_deep_linear/_jump.py; :func:`perturbed_layers` perturbs
    every entry): balanced layers holding ``W^k``
    and ``e^L u vᵀ`` at :func:`~gradflow._deep_linear._jump.start_scale`, and its first window."""
    u, v = pair
    e, window = start_scale(model.depth, eps, G, u, v)
    return balanced_layers(W, k, narrow_shapes(model.layer_shapes, k + 1), (u, e**model.depth, v)), window


def perturbed_layers(layers, rank: int, size: float, rng: np.random.Generator):
    """``layers`` (held in their first ``rank`` hidden coordinates) with Gaussian noise, clipped to ±3, on those
    coordinates' entries (Assumption 4.4's perturbed starts, the family's analogue of the kit's
    ``perturbed_starts``): each such row of ``W_1 … W_{L−1}`` and column of ``W_L`` moves by about ``size`` times
    its norm, in a random direction, so that the new mode moves relative to its own small scale and the sleeping
    coordinates stay asleep. Additive, not the kit's multiplicative noise: that keeps the zero entries of an aligned
    start's layers, and with them a flow that stays aligned (it would miss a phase (B) that ends at a saddle)."""
    out = [w.copy() for w in layers]
    for l, w in enumerate(out):
        last = l == len(out) - 1
        block = w[:, :rank] if last else w[:rank, :] if l == 0 else w[:rank, :rank]
        axis = 0 if last else 1
        rms = np.linalg.norm(block, axis=axis, keepdims=True) / np.sqrt(block.shape[axis])
        block += size * np.clip(rng.standard_normal(block.shape), -3.0, 3.0) * rms
    return out


def stage_hessian(model: DeepLinearModel, W: np.ndarray, k: int) -> float:
    """The smallest eigenvalue of the Hessian of ``L(W_L ⋯ W_1)`` in the layers at the balanced layers of the
    rank-``k`` ``W`` (:func:`balanced_layers`), on the rank-``k`` stratum and off the gauge
    (gradflow/_deep_linear/_gauge.py: positive exactly when ``W`` is a strict local minimum of ``L`` on the rank-``k``
    matrices). The Hessian is minus the Jacobian of the layers' velocities, phase (B)'s compiled program, at hidden
    width ``k``: the stratum's entries (the others carry no curvature there)."""
    shapes = narrow_shapes(model.layer_shapes, k)
    layers = balanced_layers(W, k, shapes)
    hessian = -np.asarray(flat_jacobian(model, _pack(layers), shapes))
    return min_eig_off_gauge(hessian, layers, k)


def _hessian_checks(model: DeepLinearModel, Ws, scale: float, tol: GreedyTolerances):
    """``(eigenvalues, ok, warnings)``: :func:`stage_hessian` of every stage ``W^k`` (``∞`` at ``W^0 = 0``, which has
    no direction on its stratum), whether it is above ``tol.hessian · σ_1(G_0) · σ_1(W^k)^{(L−2)/L}`` (the layers'
    Hessian has the units of ``G`` times the layers' size to the ``L − 2``), and the warnings where not."""
    L, eigs, messages = model.depth, [math.inf], []
    ok = np.ones(len(Ws), bool)
    for k, W in enumerate(Ws[1:], start=1):
        eigs.append(stage_hessian(model, W, k))
        ok[k] = eigs[-1] > tol.hessian * scale * float(np.linalg.norm(W, 2)) ** ((L - 2) / L)
        if not ok[k]:
            messages.append(
                f"W^{k} is not a strict local minimum at rank {k}: the Hessian in the layers has smallest eigenvalue "
                f"{eigs[-1]:.3g} on the rank-{k} layers off the gauge directions."
            )
    return np.asarray(eigs), ok, messages


def _perturbation_spread(model, W, k: int, pair, G, W_new, scale: float, tol: GreedyTolerances, rng) -> float:
    """Assumption 4.4: the largest ``‖W(p) − W^{k+1}‖ / ‖W^{k+1}‖`` over ``tol.perturbations`` runs of phase (B)
    from :func:`perturbed_layers` of the start at the larger of the two ε (``∞`` for a run that does not become
    stationary)."""
    start, horizon = _phase_b_start(model, W, k, pair, G, tol.epsilons[-2])
    size, spread = max(float(np.linalg.norm(W_new)), 1e-300), 0.0
    for _ in range(tol.perturbations):
        layers, _, ok = phase_b(model, perturbed_layers(start, k + 1, tol.perturbation, rng), scale, tol, horizon)
        spread = max(spread, float(np.linalg.norm(product(layers) - W_new)) / size if ok else math.inf)
    return spread


def _assumptions(model, Ws, transitions, scale: float, tol: GreedyTolerances, check: bool, warnings_: list):
    """``(hessian_min_eig, perturbation_spread, assumptions_ok)`` of a path's stages ``Ws`` (see
    :class:`DeepLinearGreedyPath`), the Hessian's warnings appended to ``warnings_`` and emitted."""
    K = len(Ws) - 1
    hessian, minimum = np.full(K + 1, np.nan), np.ones(K + 1, bool)
    hessian[0] = math.inf
    if check:
        hessian, minimum, messages = _hessian_checks(model, Ws, scale, tol)
        for text in messages:
            warnings_.append(text)
            warn(text)
    spread = np.array([float(t["spread"]) for t in transitions])
    ok = np.ones((K + 1, 3), bool)  # Assumptions 4.2 (a unique escape), 4.3 (a strict local minimum), 4.4
    ok[:, 1] = minimum
    for k, step in enumerate(transitions):
        ok[k, 0] = float(step["gap"]) > tol.tie
        ok[k, 2] = float(step["discrepancy"]) <= tol.epsilon_agreement and not spread[k] > tol.spread
    return hessian, spread, ok


def _kept(model, stages: list, transitions: list) -> tuple[list, ...]:
    """The records of :func:`greedy`'s loop for the stages a checkpoint kept (none: the start ``W^0``): ``times``,
    ``Ws``, the singular values of ``G_k`` and the loss (but the last stage's), the stationarity, ``Δ``, the gaps, the
    ε discrepancies and the warnings (emitted again)."""
    times, Ws, stat = [0.0], [product(list(stages[0]["layers"]))], [0.0]
    gsv, loss, deltas, gaps, eps_disc, warnings_ = [], [], [], [], [], []
    for j, step in enumerate(transitions):
        gsv.append(np.linalg.svd(step["G"], compute_uv=False))
        loss.append(float(model.loss_of_weights(Ws[-1])))
        times.append(times[-1] + float(step["delta"]))
        deltas.append(float(step["delta"]))
        gaps.append(float(step["gap"]))
        eps_disc.append(float(step["discrepancy"]))
        stat.append(float(step["stationarity"]))
        Ws.append(product(list(stages[j + 1]["layers"])))
        for text in step["warnings"]:
            warnings_.append(text)
            warn(text)
    return times, Ws, gsv, loss, stat, deltas, gaps, eps_disc, warnings_


def _check_request(model: DeepLinearModel, u0, v0):
    """The layers' directions ``u0`` of a greedy limit (:func:`check_layers`), for ``L ≥ 3`` and without ``v0``."""
    if model.depth == 2:
        raise ValueError(
            "greedy_limit of a DeepLinearModel needs depth L ≥ 3; at L = 2 the network is a FactorizedModel "
            "(W = U Vᵀ with U = W_2, V = W_1ᵀ), whose greedy low-rank limit gradflow computes."
        )
    if v0 is not None:
        raise ValueError(
            "a DeepLinearModel takes its layers' directions as u0, a tuple of L matrices; v0 is not taken."
        )
    if u0 is None:
        raise ValueError(
            "give the layers' initial directions u0: the deep linear greedy limit's stage times depend on them."
        )
    return check_layers(model, u0)


def greedy(
    model: DeepLinearModel, *, u0, v0, max_stages, tolerances, check_assumptions, seed, progress, checkpoint=None
):
    """``greedy_limit`` for a deep linear network from the layers' directions ``u0`` (L ≥ 3). ``check_assumptions``:
    the Hessian of every ``W^k`` on its rank-``k`` stratum (:func:`stage_hessian`) and phase (B) from perturbed starts
    (:func:`_perturbation_spread`, seeded by ``seed``); see :class:`DeepLinearGreedyPath`. ``checkpoint``: a file that
    keeps the finished stages (``gradflow._kit._checkpoint.Checkpoint``), resumed by a later call with the same model,
    ``u0``, tolerances, ``check_assumptions`` and ``seed``."""
    tol = tolerances
    W0 = _check_request(model, u0, v0)
    L, (m, n), rank = model.depth, model.shape, model.rank
    W = np.zeros((m, n))
    G = np.asarray(_gradient(model, W))
    scale = float(np.linalg.norm(G, 2))
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"the gradient at W = 0 is {'zero' if scale == 0 else 'not finite'}: the flow never leaves 0.")
    # A^k in the hidden coordinates of the flow from W0, and S, the sleeping layers off its learned subspaces
    stages, transitions = [dict(layers=tuple(np.zeros_like(w) for w in W0), sleeping=tuple(W0))], []
    rng = np.random.default_rng(seed)  # the perturbations of Assumption 4.4
    if checkpoint is not None:
        key = dict(
            model=_checkpoint.fingerprint(model, _probe), u0=W0, tolerances=tol, check=check_assumptions, seed=seed
        )
        checkpoint = _checkpoint.Checkpoint(checkpoint, key, rng)
        stages, transitions = checkpoint.start(stages[0], max_stages, progress)
    times, Ws, gsv, loss, stat, deltas, gaps, eps_disc, warnings_ = _kept(model, stages, transitions)
    W, A, S = Ws[-1], [np.asarray(w) for w in stages[-1]["layers"]], [np.asarray(w) for w in stages[-1]["sleeping"]]
    G = np.asarray(_gradient(model, W))
    result, message, final_delta = RESULTS.successful.value, "", math.inf
    try:
        for k in range(len(times) - 1, rank + 1):
            emitted = len(warnings_)
            gsv.append(np.linalg.svd(G, compute_uv=False))
            loss.append(float(model.loss_of_weights(W)))
            if k == rank:
                message = f"W reached the largest rank, {rank}: no direction is left to learn"
                break
            if max_stages is not None and k >= max_stages:
                final_delta = escape(G, S, L).delta
                result = RESULTS.max_stages.value
                message = f"stopped after max_stages = {max_stages} stages (final_delta holds the next Δ)"
                break
            if not np.any(np.linalg.svd(G, compute_uv=False) > tol.g_zero * scale):
                message = "T = ∞: −∇L(W^k) vanishes on the sleeping directions (a stationary point of every rank)"
                break
            out = escape(G, S, L)
            delta, u, v = out.delta, out.u, out.v
            if not math.isfinite(delta):
                message = f"T = ∞: the α-free flow of the sleeping layers out of stage {k} does not blow up"
                break
            gap = escape(G, out.rest, L).delta / delta if k + 1 < rank else math.inf  # no runner-up at full rank
            if gap <= tol.tie:
                warnings_.append(
                    f"stage {k + 1}: the two candidate directions are tied (relative gap {gap:.3g} ≤ {tol.tie:g}): the "
                    "greedy limit's choice between them is arbitrary"
                )
                warn(warnings_[-1])
            ends, smallest = [], len(tol.epsilons[-2:]) - 1
            for i, eps in enumerate(tol.epsilons[-2:]):
                if i < smallest:
                    layers, stationarity, ok, _ = jump_from(model, A, k, out, G, eps, scale, tol)
                else:
                    layers, rest, stationarity, ok, warning = _last_jump(model, A, k, out, G, eps, scale, tol)
                if not ok:
                    result = RESULTS.phase_b_failed.value
                    message = (
                        f"phase (B) of stage {k + 1} did not reach a stationary point within {tol.max_steps} evaluations "
                        f"(stationarity {stationarity:.3g} > {tol.stationary:g})"
                    )
                    raise StopIteration
                ends.append(layers)
            if warning:
                warnings_.append(warning)
                warn(warning)
            A = layers
            W_new = product(A)
            S = list(off_frames(rest, learned_frames(A, k + 1)))
            disc = float(np.linalg.norm(product(ends[0]) - W_new) / max(np.linalg.norm(W_new), 1e-300))
            if disc > tol.epsilon_agreement:
                warnings_.append(
                    f"stage {k + 1}: phase (B) from the two smallest ε ends {disc:.3g} apart (relative), more than "
                    f"{tol.epsilon_agreement:g}: the ε → 0 limit is not reached"
                )
                warn(warnings_[-1])
            spread = math.nan
            if check_assumptions and tol.perturbations:
                spread = _perturbation_spread(model, W, k, (u, v), G, W_new, scale, tol, rng)
                if spread > tol.spread:
                    warnings_.append(
                        f"stage {k + 1}: Assumption 4.4 fails: perturbing phase (B)'s start moves its endpoint by "
                        f"{spread:.3g} (relative), more than spread = {tol.spread:g}"
                    )
                    warn(warnings_[-1])
            stages.append(dict(layers=tuple(A), sleeping=tuple(S)))
            step = dict(G=G, delta=delta, gap=gap, discrepancy=disc, stationarity=stationarity, spread=spread)
            transitions.append(dict(step, warnings=warnings_[emitted:]))
            if checkpoint is not None:
                checkpoint.save(stages, transitions)
            times.append(times[-1] + delta)
            deltas.append(delta)
            gaps.append(gap)
            eps_disc.append(disc)
            stat.append(stationarity)
            W = W_new
            Ws.append(W)
            G = np.asarray(_gradient(model, W))
            if progress:
                print(
                    f"greedy stage {k + 1}: T = {times[-1]:.6g}, loss = {float(model.loss_of_weights(W)):.6g}",
                    flush=True,
                )
            check_interrupt()
    except StopIteration:
        pass
    except KeyboardInterrupt:
        result = RESULTS.interrupted.value
        message = f"greedy_limit was interrupted (Ctrl-C) during stage {len(times)}; the stages before it are kept"
    K = len(times) - 1
    gsv, loss = gsv[: K + 1], loss[: K + 1]
    while len(loss) < K + 1:  # the last stage's records when the loop stopped inside it
        gsv.append(np.linalg.svd(np.asarray(_gradient(model, Ws[len(loss)])), compute_uv=False))
        loss.append(float(model.loss_of_weights(Ws[len(loss)])))
    hessian, spread, ok = _assumptions(model, Ws, transitions[:K], scale, tol, check_assumptions, warnings_)
    return DeepLinearGreedyPath(
        times=np.asarray(times),
        b=np.triu(np.ones((K + 1, rank))),  # stage k: its k learned singular values at 0, the others at 1
        loss=np.asarray(loss),
        final_delta=np.array([final_delta]),
        delta_gap=np.asarray(gaps),
        runner_up=np.full(K, -1),
        hessian_min_eig=hessian,
        stationarity=np.asarray(stat),
        epsilon_discrepancy=np.asarray(eps_disc),
        perturbation_spread=spread,
        assumptions_ok=ok,
        result=result,
        message=message,
        warnings=tuple(warnings_),
        W=np.stack(Ws),
        gradient_singular_values=np.stack(gsv),
        delta=np.asarray(deltas),
        depth=L,
    )
