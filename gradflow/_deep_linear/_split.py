"""The exact flow of a deep linear network between the direct integration's range and the small-α path's (``L ≥ 3``,
outputs linear in ``W``, any loss): the layers split as ``W_l = A_l + α S_l`` (docs/deep-linear.md, *Between the
two ranges*).

``A`` moves by the layers' own flow, ``dA/dt = F(A)`` (``F_l(W) = W_{>l}ᵀ G(W) W_{<l}ᵀ``): at rest on a plateau,
through a jump the flow that carries the escaping mode. ``S``, the rest in units of α, moves by ``(F(A + αS) −
F(A))/α``, expanded so that nothing cancels: with ``Δ_{<l} = (W_{<l} − A_{<l})/α``, ``Δ_{>l}`` likewise and ``ΔG =
(G(W) − G(W_A))/α`` (``K[D]`` for an affine ``G``, else a quadrature of ``∇²ℓ̄`` along the segment),

    dS_l/dt = Δ_{>l}ᵀ G_A A_{<l}ᵀ + A_{>l}ᵀ G_A Δ_{<l}ᵀ + α Δ_{>l}ᵀ G_A Δ_{<l}ᵀ + W_{>l}ᵀ ΔG W_{<l}ᵀ.

It is solved in ``t = (τ − τ_0)/α^{L−2}`` from each escape by Radau with the exact Jacobian (with a floor on
Newton's tolerance: :class:`gradflow._solver.RadauNewtonFloor`), or, matrix-free, by Kvaerno5 with GMRES on
Jacobian-vector products for Newton's equations (and ``G = G0 − W C`` where it has that form, with no ``(mn)²``
coefficients: :class:`RightGradient`), in frames: orthonormal bases
of the input, hidden and output spaces whose first ``k`` vectors span ``A``'s learned subspaces, so that ``A``
is its ``k×k`` block and the sleeping blocks of ``S`` carry only their own rounding (computed in the layers' own
coordinates, the rounding of ``A`` and of the cancelling forces on the blocks that meet a learned subspace lands in
them at ``eps/α``); ``G`` is evaluated in them too, from coefficients rotated once per frame (``G̃(0)`` and
``K̃`` of :class:`AffineGradient`, or ``M̃`` of :class:`LinearOutputs`). The frames turn to
``A``'s singular subspaces whenever its blocks off the ``k×k`` block exceed :data:`ROTATION` of its size (along a
jump) and once ``A`` has settled after a jump; those blocks are then rounding and are dropped. Where the sleeping
blocks' top mode reaches ``α‖S‖ = e = max(√α, 1e8^{−1/(L−2)})`` (:func:`gradflow._deep_linear._held.escape_scale`)
it moves into ``A``: the top right singular vector ``b_0`` of the product
of the sleeping blocks, carried up the layers (``b_l ∝ S_l b_{l−1}``), as the rank-one chain ``b_l b_lᵀ S_l b_{l−1}
b_{l−1}ᵀ``, moved exactly (the sleeping subspaces turned so that each ``b_l`` is their first axis). The sleeping
singular values are read in the frames in which the layers are block upper triangular: the product of the blocks
``A_l/α + S_l`` off the learned subspaces. Where ``α^{L−2} < HELD`` the plateaus (from the start, and after each jump
has settled) are held instead: ``A`` at rest, ``S`` in ``τ`` (gradflow/_deep_linear/_held.py); the equations
themselves are in gradflow/_deep_linear/_split_fields.py.
"""

from __future__ import annotations

import dataclasses
import math

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

from .._config import check_interrupt
from .._results import RESULTS
from .._solver import solve_in_segments
from .._solver._radau import RadauNewtonFloor
from .._solver._segments import Progress
from ._held import HELD, align, chunk_unit, escape_scale, growth, held_chunk, sleeping_size, ungauge
from ._model import DeepLinearModel, _pack, _unpack, losses, product
from ._results import DeepLinearFlowResult
from ._split_chunks import ARMED, ROTATION, SETTLED, ChunkArgs, chunk_advance, chunk_end, chunk_start, speed_of_A
from ._split_fields import jacobian, split_gradient, velocity

_speed_of_A = eqx.filter_jit(speed_of_A)


def _rotate(layers, frames):
    """``Q_lᵀ X_l Q_{l−1}`` for every layer."""
    return [frames[l + 1].T @ x @ frames[l] for l, x in enumerate(layers)]


def _unrotate(layers, frames):
    return [frames[l + 1] @ x @ frames[l].T for l, x in enumerate(layers)]


def _svd_frames(A, k: int) -> list[np.ndarray]:
    """Rotations (in the current frames) to ``A``'s own singular subspaces: the input's from ``A_1``'s right singular
    vectors, each other space's from its layer's left ones; of the learned ``k×k`` blocks alone where ``A`` is zero off
    them (as after the escape from a held plateau, where ``A`` was at rest), so that it stays exactly so."""
    if all(not np.any(a[k:]) and not np.any(a[:, k:]) for a in A):
        turns = [np.eye(A[0].shape[1])] + [np.eye(a.shape[0]) for a in A]
        turns[0][:k, :k] = np.linalg.svd(A[0][:k, :k])[2].T
        for l, a in enumerate(A):
            turns[l + 1][:k, :k] = np.linalg.svd(a[:k, :k])[0]
        return turns
    return [np.linalg.svd(A[0])[2].T] + [np.linalg.svd(a)[0] for a in A]


def _turn(A, S, frames, k):
    """Frames turned to ``A``'s singular subspaces, and ``A``, ``S`` in them, ``A`` cut to its ``k×k`` block (its
    other blocks are rounding there; none where :func:`_svd_frames` turns the learned blocks alone: an ``eps`` of
    ``A`` cut is ``eps/α`` of ``S``, and cut at each turn it put the sleeping modes' ``log σ`` off by ``eps/α``, 2e-4
    at α = 1e-12)."""
    turn = _svd_frames(A, k)
    A, S = _rotate(A, turn), _rotate(S, turn)
    for a in A:
        a[k:, :] = 0.0
        a[:, k:] = 0.0
    return A, S, [q @ r for q, r in zip(frames, turn)]


def _escape_into_A(A, S, frames, k, alpha):
    """Move the sleeping blocks' top mode into ``A`` as a rank-one chain (the module's docstring): the sleeping
    subspaces turned so that the chain is their first axis (:func:`gradflow._deep_linear._held.align`), its entry
    ``k, k`` of each layer moves from ``S`` into ``A``, exactly. Returns the frames."""
    S[:], frames = align(S, frames, k)
    for a, s in zip(A, S):
        a[k, k] += alpha * s[k, k]
        s[k, k] = 0.0
    return frames


def log_singular_values(A, S, k: int, log_alpha: float, rank: int) -> np.ndarray:
    """``log σ`` of ``W = Π (A_l + α S_l)``, descending: the ``k`` learned ones from ``W``; the sleeping ones from the
    product of each layer's block off the images of the input's learned subspace (the layers are block upper
    triangular in those frames, so the product's block is the product of theirs), ``A``'s part over α plus ``S``'s,
    times ``α^L``."""
    alpha, L = math.exp(log_alpha), len(A)
    layers = [a + alpha * s for a, s in zip(A, S)]
    _, sv, Vt = np.linalg.svd(np.asarray(product(layers)))
    blocks, learned = [], Vt[:k].T
    for l in range(L):
        off_in = _complement(learned)
        out = _complement(layers[l] @ learned, keep=True)
        off_out = out[:, k:]
        blocks.append(off_out.T @ A[l] @ off_in / alpha + off_out.T @ S[l] @ off_in)
        learned = out[:, :k]
    with np.errstate(divide="ignore"):
        asleep = L * log_alpha + np.log(np.linalg.svd(np.asarray(product(blocks)), compute_uv=False))
        return np.sort(np.concatenate([np.log(sv[:k]), asleep]))[::-1][:rank]


def _complement(X, keep: bool = False):
    """An orthonormal basis of the space whose first ``X.shape[1]`` vectors span ``X``'s columns (``keep``), or of
    their orthogonal complement alone."""
    Q = np.eye(X.shape[0]) if X.shape[1] == 0 else np.linalg.svd(X, full_matrices=True)[0]
    return Q if keep else Q[:, X.shape[1] :]


@dataclasses.dataclass
class _Run:
    """The split flow at one α, chunk by chunk (between escapes and turns of the frames)."""

    model: DeepLinearModel
    log_alpha: float
    rtol: float
    atol: float
    free: bool = False  # the chunks by Kvaerno5 with a matrix-free Newton, not Radau with the dense Jacobian
    steps: int = 0
    turns: int = 0
    calls: int = 0
    stop: str | None = None  # why the run stopped early: "max_steps_reached" or "interrupted"
    stop_at: float = math.inf  # the chunk's t where it stopped
    outputs: list = dataclasses.field(default_factory=list)

    def solve(self, W0, ts, gradient, *, max_steps, reached):
        """``(result, message)``, with ``self.outputs[i] = (A, S, log σ)`` (:meth:`_output`) at ``ts[i]`` (None
        after the time reached, which Ctrl-C and the step budget keep); ``gradient`` is :func:`split_gradient`'s, with
        NumPy arrays."""
        model, L = self.model, self.model.depth
        shapes = tuple(model.layer_shapes)
        alpha, unit = math.exp(self.log_alpha), math.exp((L - 2) * self.log_alpha)
        e = escape_scale(self.log_alpha, L)
        frames = [np.eye(shapes[0][1])] + [np.eye(s[0]) for s in shapes]
        A, S = [np.zeros(s) for s in shapes], [np.array(w, dtype=np.float64) for w in W0]
        k, tau0, jumping, holding, armed = 0, 0.0, False, unit < HELD, [False]
        self.outputs = [None] * len(ts)
        while tau0 < ts[-1]:
            if holding:
                S, frames, tau0, escaped, failure = self._hold(
                    A, S, frames, k, tau0, ts, gradient, e, max_steps, reached
                )
                if failure:
                    return RESULTS.solver_failed.value, failure
                if self.stop is not None:
                    return self._stopped(max_steps, tau0)
                if not escaped:
                    break
                frames = _escape_into_A(A, S, frames, k, alpha)
                k, jumping, holding, armed = k + 1, True, False, [False]
                A, S, frames = _turn(A, S, frames, k)
                continue
            chunk = self._kvaerno_chunk if self.free else self._radau_chunk
            A, S, t_stop, ended, failure = chunk(
                A, S, frames, k, tau0, ts, gradient, e, jumping, armed, max_steps, reached
            )
            tau0 += t_stop * unit
            if failure:
                return RESULTS.solver_failed.value, (
                    f"the split flow's solver failed at τ = {tau0:.6g} ({failure}); the outputs after it are +inf. "
                    "Try another atol."
                )
            if ended == "end":
                break
            if ended == "stopped":
                return self._stopped(max_steps, tau0)
            if ended == "armed":
                armed[0] = True
                continue
            if ended == "escaped":
                frames = _escape_into_A(A, S, frames, k, alpha)
                k, jumping, armed = k + 1, True, [False]
                A, S, frames = _turn(A, S, frames, k)
                continue
            if ended == "settled":
                jumping, holding = False, unit < HELD
            A, S, frames = _turn(A, S, frames, k)
            self.turns += 1
        return RESULTS.successful.value, ""

    def _radau_chunk(self, A, S, frames, k, tau0, ts, gradient, e, jumping, armed, max_steps, reached):
        """One chunk by SciPy's Radau with the dense Jacobian, from ``τ0`` to the first of its events or ``ts[-1]``:
        ``(A, S, t it lasted, why it ended, why its solver failed or "")``, the outputs it passed filled in. It ends
        ``"end"``, ``"stopped"`` (the step budget or Ctrl-C), ``"escaped"`` (the sleeping blocks' top mode reached
        ``e``), ``"turned"`` (``A``'s blocks off its learned block exceed :data:`ROTATION`) or ``"settled"`` (after a
        jump, ``A``'s velocity at most :data:`SETTLED` of the tolerance, once above :data:`ARMED` times it)."""
        L, shapes = len(A), tuple(a.shape for a in A)
        alpha, unit = math.exp(self.log_alpha), math.exp((L - 2) * self.log_alpha)
        tol = self.atol + self.rtol
        args = (gradient.in_frames(frames), jnp.asarray(self.log_alpha), shapes)

        def stopped(t, y):  # once a step (and in the root finding): ends the chunk where the budget or Ctrl-C fell
            if self.stop is None:
                self._count(max_steps, reached, tau0 + t * unit, t)
            return 1.0 if t < self.stop_at else -1.0

        def escaped(t, y):
            return sleeping_size(_unpack(y, shapes * 2)[L:], k) * alpha - e

        def turned(t, y):
            if k == 0:
                return -1.0
            A_ = _unpack(y, shapes * 2)[:L]
            size = max(np.abs(a).max() for a in A_)
            off = max(max(np.abs(a[k:]).max(initial=0.0), np.abs(a[:, k:]).max(initial=0.0)) for a in A_)
            return off - ROTATION * size

        def settled(t, y):  # armed once A moves: a held plateau hands over A at the settling speed
            if not jumping:
                return 1.0
            speed = float(_speed_of_A(_unpack(y, shapes), args[0]))
            armed[0] = armed[0] or speed > ARMED * SETTLED * tol
            return speed - SETTLED * tol if armed[0] else 1.0

        for event in (stopped, escaped, turned, settled):
            event.terminal = True
        stopped.direction, escaped.direction, turned.direction, settled.direction = -1, 1, 1, -1
        self.calls = 0
        sol = solve_ivp(
            lambda t, y: np.asarray(velocity(y, *args)),
            (0.0, (ts[-1] - tau0) / unit),
            _pack(A + S),
            method=RadauNewtonFloor,
            rtol=tol,
            atol=self.atol,
            events=[stopped, escaped, turned, settled],
            jac=lambda t, y: np.asarray(jacobian(y, *args)),
            dense_output=True,
        )
        t_stop = float(sol.t[-1])
        self.steps += sol.t.size - 1
        for i, tau in enumerate(ts):
            if tau0 <= tau and (tau - tau0) / unit <= t_stop and self.outputs[i] is None:
                parts = _unpack(sol.sol((tau - tau0) / unit), shapes * 2)
                self.outputs[i] = self._output(parts[:L], parts[L:], frames, k)
        parts = [np.array(x) for x in _unpack(sol.y[:, -1], shapes * 2)]
        A, S = parts[:L], parts[L:]
        if sol.status == 0:
            return A, S, t_stop, "end", ""
        if sol.status != 1 or not np.all(np.isfinite(sol.y[:, -1])):
            return A, S, t_stop, "failed", sol.message
        ended = [ev.size and ev[-1] == sol.t[-1] for ev in sol.t_events]
        why = ("stopped", "escaped", "turned", "settled")[ended.index(True)] if any(ended) else "turned"
        return A, S, t_stop, why, ""

    def _kvaerno_chunk(self, A, S, frames, k, tau0, ts, gradient, e, jumping, armed, max_steps, reached):
        """:meth:`_radau_chunk`'s chunk by Kvaerno5 with Newton's equations solved matrix-free
        (``gradflow._solver.stiff_solve``), its events checked at the end of every step (a step late: where they
        fall is not exact in the split, whose escape, turn and settling are exact changes of coordinates wherever
        they are made); it also ends ``"armed"`` where ``A``'s velocity first exceeds :data:`ARMED` times the settled
        one in a jump."""
        L, shapes = len(A), tuple(a.shape for a in A)
        unit = math.exp((L - 2) * self.log_alpha)
        out_ts = (np.asarray(ts) - tau0) / unit
        args = ChunkArgs(
            gradient.in_frames(frames),
            jnp.asarray(self.log_alpha),
            shapes,
            jnp.asarray(k),
            jnp.asarray(e),
            jnp.asarray(jumping),
            jnp.asarray(armed[0]),
            jnp.asarray(SETTLED * (self.atol + self.rtol)),
        )
        out = jnp.asarray(out_ts)
        budget = None if max_steps is None else max(max_steps - self.steps, 0)
        seg, result, stopped = solve_in_segments(
            lambda seg, b: chunk_advance(args, seg, b, out, self.rtol, self.atol),
            chunk_start(args, jnp.asarray(_pack(A + S)), out, self.rtol, self.atol),
            out[-1],
            max_steps=budget,
            progress=lambda t: reached(tau0 + float(np.max(t)) * unit),
        )
        self.steps += int(np.asarray(seg.stats)[1])
        ys, t_stop = np.asarray(seg.ys), float(seg.t)
        for i in np.flatnonzero((out_ts >= 0) & np.all(np.isfinite(ys), axis=1)):
            if self.outputs[i] is None:
                parts = _unpack(ys[i], shapes * 2)
                self.outputs[i] = self._output(parts[:L], parts[L:], frames, k)
        parts = [np.array(x) for x in _unpack(np.asarray(seg.y), shapes * 2)]
        A, S = parts[:L], parts[L:]
        if stopped or result == dfx.RESULTS.max_steps_reached:
            self.stop = RESULTS.interrupted.value if stopped else RESULTS.max_steps_reached.value
            return A, S, t_stop, "stopped", ""
        if result == dfx.RESULTS.successful:
            return A, S, t_stop, "end", ""
        if result != dfx.RESULTS.event_occurred or not np.all(np.isfinite(np.asarray(seg.y))):
            return A, S, t_stop, "failed", str(dfx.RESULTS[result])
        return A, S, t_stop, chunk_end(args, jnp.asarray(seg.y)), ""

    def _output(self, A, S, frames, k):
        """``(A, S, log σ)`` for an output: the layers in the original coordinates, ``log σ`` read in the frames,
        where ``A`` is zero off its learned blocks (read after turning back, ``A``'s rounding there, over α, put the
        sleeping modes off by ``eps/α``: 2e-4 at α = 1e-12)."""
        log_sv = log_singular_values(A, S, k, self.log_alpha, self.model.rank)
        return _unrotate(A, frames), _unrotate(S, frames), log_sv

    def _hold(self, A, S, frames, k, tau0, ts, gradient, e, max_steps, reached):
        """A held plateau from ``τ0`` (gradflow/_deep_linear/_held.py), chunk by chunk, to where the sleeping
        blocks' top mode reaches ``e`` or to ``ts[-1]``: ``(S, frames, τ reached, whether it reached e, why its
        solver failed or "")``, the outputs reached filled in; ``self.stop`` is set where Ctrl-C or the step budget
        stopped it."""
        alpha, previous = math.exp(self.log_alpha), None
        while True:
            S, frames = align(*ungauge(A, S, frames, k, alpha), k)
            level = min(e, growth(len(A)) * alpha * sleeping_size(S, k))
            budget = None if max_steps is None else max(max_steps - self.steps, 0)
            outs, S, t_end, grown, result, stopped, steps = held_chunk(
                A,
                S,
                frames,
                k,
                gradient.in_frames(frames),
                self.log_alpha,
                ts - tau0,
                level=level,
                unit=chunk_unit(float(ts[-1] - tau0), previous),
                rtol=self.rtol,
                atol=self.atol,
                matrix_free=self.free,
                max_steps=budget,
                progress=lambda t, start=tau0: reached(start + float(np.max(t))),
            )
            self.steps += steps
            for i, out in enumerate(outs):
                if out is not None and self.outputs[i] is None:
                    self.outputs[i] = self._output(A, out, frames, k)
            tau0 += t_end
            if stopped or result == dfx.RESULTS.max_steps_reached:
                self.stop = RESULTS.interrupted.value if stopped else RESULTS.max_steps_reached.value
                return S, frames, tau0, False, ""
            if not grown:
                why = f"the split flow's held plateau failed at τ = {tau0:.6g} ({dfx.RESULTS[result]}); the outputs "
                ok = result == dfx.RESULTS.successful
                return S, frames, tau0, False, "" if ok else why + "after it are +inf. Try another atol."
            if level >= e:
                return S, frames, tau0, True, ""
            previous = t_end

    def _count(self, max_steps, reached, tau, t):
        """Called once a step by the first event: the step budget, Ctrl-C and the progress bar; where one of the first
        two stops the run, the chunk ends at this ``t``."""
        self.calls += 1
        reached(tau)
        if max_steps is not None and self.steps + self.calls > max_steps:
            self.stop, self.stop_at = RESULTS.max_steps_reached.value, t
            return
        try:
            check_interrupt()
        except KeyboardInterrupt:
            self.stop, self.stop_at = RESULTS.interrupted.value, t

    def _stopped(self, max_steps, tau):
        if self.stop == RESULTS.interrupted.value:
            raise KeyboardInterrupt
        return self.stop, (
            f"the split flow took its max_steps = {max_steps} steps at τ = {tau:.6g}; the outputs after it are +inf. "
            "Try a larger max_steps."
        )


def flow(
    model: DeepLinearModel, W0, ts, log_a, *, rtol: float, atol: float, max_steps, progress: bool, free: bool, form=None
):
    """``simulate_flow`` for scales between the two ranges (every ``log α`` there): one split flow per α, by Kvaerno5
    with a matrix-free Newton where ``free``, else by Radau with the dense Jacobian; ``G`` in ``form``
    (:func:`~gradflow._deep_linear._split_fields.split_form`'s, read from the model here if None)."""
    ts = np.asarray(ts)
    log_alphas = np.atleast_1d(np.asarray(log_a, dtype=np.float64))
    gradient = split_gradient(model, free=free, form=form)
    bar = Progress(float(ts[-1]), log_alphas.size, desc="simulate_flow", enabled=progress)
    runs, results, messages, steps, turns = [], [], [], [], []
    interrupted = False
    try:
        for j, la in enumerate(log_alphas):
            run = _Run(model, float(la), rtol, atol, free)
            if interrupted:
                result, message = RESULTS.interrupted.value, "simulate_flow was interrupted (Ctrl-C) before this run"
            else:
                try:
                    result, message = run.solve(W0, ts, gradient, max_steps=max_steps, reached=bar.run(j, 1.0))
                except KeyboardInterrupt:
                    interrupted, result = True, RESULTS.interrupted.value
                    message = "simulate_flow was interrupted (Ctrl-C); the outputs it had reached are kept, those after are +inf"
            runs.append(_outputs(model, run.outputs or [None] * len(ts), ts, float(la)))
            results.append(result)
            messages.append(message)
            steps.append(run.steps)
            turns.append(run.turns)
    finally:
        bar.close()
    layers, W, log_sv, loss = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *runs)
    batched = np.ndim(log_a) > 0
    pick = (lambda x: x) if batched else (lambda x: x[0])
    return DeepLinearFlowResult(
        ts=ts,
        layers=tuple(pick(x) for x in layers),
        W=pick(W),
        log_singular_values=pick(log_sv),
        loss=pick(loss),
        log_alpha=np.array(log_a),
        stats=dict(
            num_steps=pick(np.array(steps)),
            num_accepted_steps=pick(np.array(steps)),
            num_frame_turns=pick(np.array(turns)),
            max_steps=max_steps,
        ),
        result=pick(np.array(results)),
        message=pick(np.array(messages)),
    )


def _outputs(model: DeepLinearModel, outputs, ts, log_alpha: float):
    """The layers, ``W``, ``log σ`` and the loss at ``ts`` from the split's ``(A, S, log σ)`` (``+inf``, the loss NaN,
    where there is none)."""
    alpha = math.exp(log_alpha)
    layers = [np.full((len(ts), *shape), np.inf) for shape in model.layer_shapes]
    log_sv = np.full((len(ts), model.rank), np.inf)
    W = np.full((len(ts), *model.shape), np.inf)
    loss = np.full(len(ts), np.nan)
    done = [i for i, out in enumerate(outputs) if out is not None]
    for i in done:
        A, S, log_sv[i] = outputs[i]
        for l, (a, s) in enumerate(zip(A, S)):
            layers[l][i] = a + alpha * s
        W[i] = np.asarray(product([w[i] for w in layers]))
    if done:
        loss[done] = np.asarray(losses(model, jnp.asarray(W[done])))
    return tuple(layers), W, log_sv, loss
