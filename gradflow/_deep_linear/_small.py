"""The flow of a deep linear network at scales below the direct integration's range (``L ≥ 3``): the α → 0 limit
of the layers' flow, which the flow equals to within ``O(α)`` (docs/deep-linear.md, *Small α*).

On plateau ``k`` (from ``T_k``) the layers are ``A^k + α S(τ)``: ``A^k`` the balanced layers of the stage's
stationary point ``W^k``, ``S`` the sleeping layers in units of α, off the learned subspaces of ``A^k``, moved by the
α-free flow ``dS_l/dτ = S_{>l}ᵀ G_k S_{<l}ᵀ`` (gradflow._deep_linear._sleeping); the cross terms of the product
vanish, so ``W = W^k + α^L S_L ⋯ S_1`` and ``W``'s singular values are those of ``W^k`` and ``α^L`` times those of
``S_L ⋯ S_1``. ``S`` blows up after ``Δ_k`` along ``b_l b_{l−1}ᵀ``, per layer like ``a^{−(L−2)} = (L−2) g (Δ_k − τ)``
(``g = uᵀ G_k v``). Where ``α a`` reaches ``e = ((atol + rtol) max(1, ‖W^k‖))^{1/L}`` (the new singular value reaches
the tolerance and starts to move ``G``) the jump begins: phase (B), the layers' flow in ``t`` from
``A^k + e b_l b_{l−1}ᵀ``, at ``τ = T_k + Δ_k − (α/e)^{L−2}/((L−2) g) + α^{L−2} t``, until stationary at ``A^{k+1}``;
what is left of ``S`` is carried through it by the layers' flow linearised along it, then projected off the new
learned subspaces (both in hidden frames of the rank they hold: gradflow._deep_linear._jump). The greedy limit
(gradflow._deep_linear._greedy) is this path without the outputs between its stages.

Neglected: the blocks of ``S`` that meet a learned subspace (they relax in ``t`` to ``O(α)``), the learned layers'
lag behind their stationary point (``O(α^{L−2})``) and their imbalance (``O(α²)``): the stage times move by
``O(α)`` (measured in docs/deep-linear.md), so the path is the flow to the tolerance for ``α ≤ SMALL · (atol +
rtol)`` (gradflow._deep_linear._checks.SMALL), and its cost does not depend on α.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from .._config import check_interrupt
from .._kit._greedy import GreedyTolerances
from .._results import RESULTS
from .._solver._segments import Progress
from ._greedy import _gradient
from ._jump import Carry, Jump, carry, jump_from
from ._model import DeepLinearModel, losses, product
from ._results import DeepLinearFlowResult
from ._sleeping import Escape, _log_sv, escape, learned_frames, off_frames


@dataclasses.dataclass(frozen=True)
class Stage:
    """Plateau ``k`` from ``start = T_k``: its layers ``A^k``, the escape out of it (with ``S(τ − T_k)``), and the jump
    that ends it: phase (B) (None for the last stage), its per-layer start ``scale`` ``e``, its length ``t_end`` in
    ``t`` (to where it settled) and the sleeping layers carried through it (``carried``)."""

    start: float
    layers: tuple
    out: Escape
    jump: Jump | None = None
    scale: float = 0.0
    t_end: float = 0.0
    carried: Carry | None = None

    @property
    def end(self) -> float:
        """``T_{k+1}`` (∞ where ``S`` does not blow up)."""
        return self.start + self.out.delta

    def jump_start(self, log_alpha: float) -> float:
        """``τ`` where the jump out of this stage begins at ``α``: ``T_{k+1} − (α/e)^{L−2} / ((L−2) g)``."""
        L = len(self.layers)
        lead = math.exp((L - 2) * (log_alpha - math.log(self.scale))) / ((L - 2) * self.out.trajectory.g)
        return self.end - lead


def path(model: DeepLinearModel, W0, tau_end: float, *, rtol: float, atol: float, max_steps, progress: bool):
    """The stages up to ``τ_end``: ``(stages, result, message, steps)``, ``steps`` the accepted steps of every solve
    (``max_steps``, or None for the greedy limit's default, bounds each jump's). Ctrl-C keeps the finished stages
    (``result`` ``"interrupted"``)."""
    L, rank = model.depth, model.rank
    tol = GreedyTolerances(ode_rtol=atol + rtol, ode_atol=atol)
    tol = tol if max_steps is None else dataclasses.replace(tol, max_steps=max_steps)
    A = [np.zeros_like(w) for w in W0]
    S = [np.asarray(w) for w in W0]
    G = np.asarray(_gradient(model, np.zeros(model.shape)))
    scale = float(np.linalg.norm(G, 2))
    stages, start, steps = [], 0.0, 0
    result, message = RESULTS.successful.value, ""
    bar = Progress(tau_end, 1, desc="simulate_flow", enabled=progress)
    reached = bar.run(0, 1.0)
    try:
        for k in range(rank + 1):
            out = escape(G, S, L, trajectory=True, horizon=tau_end - start)
            steps += out.steps
            if k == rank or start + out.delta > tau_end:
                stages.append(Stage(start, tuple(A), out))
                reached(tau_end)
                break
            size = max(1.0, float(np.linalg.norm(product(A), 2))) if k else 1.0
            e = ((atol + rtol) * size) ** (1.0 / L)
            A_new, stationarity, ok, jump = jump_from(model, A, k, out, G, e ** (L - 2), scale, tol, dense=True)
            steps += jump.steps
            if not ok:
                stages.append(Stage(start, tuple(A), out, scale=e))
                result = RESULTS.max_steps_reached.value
                message = (
                    f"the jump out of stage {k} (at τ = {start + out.delta:.6g}) did not reach a stationary point "
                    f"within max_steps = {tol.max_steps} steps (stationarity {stationarity:.3g}); the outputs after it are "
                    "+inf. Try a larger max_steps."
                )
                break
            through, rest, failure = carry(model, jump, out.rest, tol)
            if failure:
                stages.append(Stage(start, tuple(A), out, scale=e))
                result = RESULTS.solver_failed.value
                message = (
                    f"the sleeping layers could not be carried through the jump out of stage {k} (at τ = "
                    f"{start + out.delta:.6g}): {failure}; the outputs after it are +inf"
                )
                break
            steps += through.steps
            stages.append(Stage(start, tuple(A), out, jump, e, jump.settled(atol + rtol), through))
            start += out.delta
            A = [np.asarray(w) for w in A_new]
            S = list(off_frames(rest, learned_frames(A, k + 1)))
            G = np.asarray(_gradient(model, product(A)))
            reached(start)
            check_interrupt()
    except KeyboardInterrupt:
        result = RESULTS.interrupted.value
        message = (
            f"simulate_flow was interrupted (Ctrl-C) in stage {len(stages)}; the outputs up to τ = {start:.6g} are "
            "kept, those after it are +inf"
        )
    finally:
        bar.close()
    return stages, result, message, steps


def reach(stages, result: str, log_alpha: float) -> float:
    """How far in ``τ`` the path holds the flow at ``α``: everywhere if it finished; up to the last stage's start if
    Ctrl-C stopped it there; up to the failed jump's start if one failed."""
    if result == RESULTS.successful.value:
        return math.inf
    if not stages:  # stopped in the first plateau
        return -math.inf
    last = stages[-1]
    if last.jump is not None:  # stopped after this stage's jump
        return last.end
    return last.jump_start(log_alpha) if last.scale else last.start  # a jump that failed, or Ctrl-C before it


def outputs(model: DeepLinearModel, stages, ts, log_alpha: float, reached: float):
    """The layers, ``W``, the logs of ``W``'s ``rank`` largest singular values and the loss at the times ``ts`` (see
    the module), ``+inf`` (the loss NaN) after ``reached``."""
    L, rank = model.depth, model.rank
    layers = [np.full((len(ts), *shape), np.inf) for shape in model.layer_shapes]
    log_sv = np.full((len(ts), rank), np.inf)
    alpha, eps_t = math.exp(log_alpha), math.exp((L - 2) * log_alpha)
    k = 0
    for i, tau in enumerate(ts):
        if tau > reached:
            break
        while k + 1 < len(stages) and tau >= stages[k].jump_start(log_alpha) + eps_t * stages[k].t_end:
            k += 1
        stage = stages[k]
        if stage.jump is not None and tau >= stage.jump_start(log_alpha):  # inside the jump out of stage k
            t_jump = (tau - stage.jump_start(log_alpha)) / eps_t
            awake, rest = stage.jump.layers_at(t_jump), stage.carried.rest_at(t_jump)
            learned, asleep = _log_sv(awake)[: k + 1], L * log_alpha + _log_sv(rest)
        else:
            awake = stage.layers
            rest, log_sv_S = stage.out.at(tau - stage.start)
            learned, asleep = _log_sv(awake)[:k], L * log_alpha + log_sv_S
        for l, (a, s) in enumerate(zip(awake, rest)):
            layers[l][i] = a + alpha * s
        log_sv[i] = np.sort(np.concatenate([learned, asleep]))[::-1][:rank]
    W = np.full((len(ts), *model.shape), np.inf)
    done = np.asarray(ts) <= reached
    W[done] = [product([w[i] for w in layers]) for i in np.flatnonzero(done)]
    loss = np.full(len(ts), np.nan)
    if np.any(done):
        loss[done] = np.asarray(losses(model, W[done]))
    return tuple(layers), W, log_sv, loss


def flow(model: DeepLinearModel, W0, ts, log_a, *, rtol: float, atol: float, max_steps, progress: bool):
    """``simulate_flow`` at small α (every ``log α`` at most ``_checks.small_log_alpha``): one path, the outputs of
    every α (the path does not depend on α)."""
    stages, result, message, steps = path(
        model, W0, float(np.max(ts)), rtol=rtol, atol=atol, max_steps=max_steps, progress=progress
    )
    batched = np.ndim(log_a) > 0
    runs = [outputs(model, stages, ts, float(la), reach(stages, result, float(la))) for la in np.atleast_1d(log_a)]
    layers, W, log_sv, loss = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *runs) if batched else runs[0]
    shape = np.shape(log_a)
    return DeepLinearFlowResult(
        ts=np.asarray(ts),
        layers=layers,
        W=W,
        log_singular_values=log_sv,
        loss=loss,
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=np.full(shape, steps),
            num_accepted_steps=np.full(shape, steps),
            num_stages=np.full(shape, len(stages)),
            max_steps=max_steps,
        ),
        result=np.full(shape, result),
        message=np.full(shape, message),
    )
