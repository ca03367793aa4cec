"""The results of the diagonal engine: the exact state of the flow, the flow sampled at output times, and discrete
training sampled every few steps (docs/math.md, *Small initialisation and the conservation law*)."""

from __future__ import annotations

import equinox as eqx
import numpy as np

from .._kit._checks import degenerate_error
from .._kit._trajectory import AbstractFlowResult, AbstractGDResult, check_time_index
from ._frame import apply_frame, weights

_TINY = float(np.finfo(np.float64).tiny)


class FlowState(eqx.Module):
    """A point ``θ = (u, v)`` of the flow, held exactly in log coordinates (docs/math.md, *Small initialisation
    and the conservation law*).

    In the sign frame ``(swap, sign)`` that makes ``u_n > |v_n|`` (paper appendix C.3), ``w = u_n + v_n`` and
    ``w̄ = u_n − v_n`` are positive and ``w w̄ = u² − v²`` is conserved by the flow; the state keeps
    ``log w`` and ``log w̄``, so weights far below the float64 range (``log w = −1e4``) are exact.
    The weights are

        u_n, v_n = (w + w̄)/2, (w − w̄)/2,
        u = sign · (v_n if swap else u_n),   v = sign · (u_n if swap else v_n).

    A state is a point, not a scale: ``simulate_flow(model, start=state, log_alpha=..., ts=...)``
    starts there, and ``α`` only sets the time unit ``τ = t / log(1/α)`` and ``b = log w / log α``.
    Get one from [`FlowResult.state_at`][gradflow.FlowResult.state_at]. Every field has shape
    ``(p,)``, or ``(B, p)`` for a batch of states (``swap`` and ``sign`` may stay ``(p,)``).

    Attributes:
        log_w: ``log w``, finite.
        log_wbar: ``log w̄``, finite (``−inf``, i.e. ``|u_i| = |v_i|``, is the degenerate case of
            Assumption 4.2).
        swap: bool, whether the frame swaps ``u`` and ``v``.
        sign: ``±1.0``, the sign the frame takes off.
    """

    log_w: np.ndarray
    log_wbar: np.ndarray
    swap: np.ndarray
    sign: np.ndarray

    @property
    def u(self) -> np.ndarray:
        """The weights ``u`` in float64 (0 where below its range)."""
        return weights(self.log_w, self.log_wbar, self.swap, self.sign)[0]

    @property
    def v(self) -> np.ndarray:
        """The weights ``v`` in float64 (0 where below its range)."""
        return weights(self.log_w, self.log_wbar, self.swap, self.sign)[1]

    def perturbed(self, du, dv) -> FlowState:
        """The state of ``θ + (du, dv)``, computed from the exact ``w, w̄``.

        With ``(du_n, dv_n)`` the shift in the frame, ``w' = w + du_n + dv_n`` and ``w̄' = w̄ + du_n − dv_n``;
        the new frame flips the sign where ``w' < 0`` and swaps ``u, v`` where ``w' w̄' < 0``, so that
        ``log w = log|w'|``, ``log w̄ = log|w̄'|``. Coordinates with ``du_i = dv_i = 0`` keep their state
        bit for bit.

        Raises:
            ValueError: ``w'`` or ``w̄'`` is 0, i.e. ``|u_i + du_i| = |v_i + dv_i|`` (Assumption 4.2).
        """
        du = np.broadcast_to(np.asarray(du, dtype=np.float64), np.shape(self.log_w))
        dv = np.broadcast_to(np.asarray(dv, dtype=np.float64), np.shape(self.log_w))
        swap = np.broadcast_to(self.swap, du.shape)
        sign = np.broadcast_to(self.sign, du.shape)
        du_n, dv_n = apply_frame(du, dv, swap, sign)
        moved = (du != 0) | (dv != 0)
        w = np.exp(self.log_w) + (du_n + dv_n)
        wbar = np.exp(self.log_wbar) + (du_n - dv_n)
        bad = moved & ((w == 0) | (wbar == 0))
        if np.any(bad):
            raise degenerate_error(
                "the perturbed weights have |u_i| = |v_i|", np.unique(np.nonzero(bad)[-1]), "Perturb them differently."
            )
        with np.errstate(divide="ignore"):
            log_w = np.where(moved, np.log(np.abs(w)), self.log_w)
            log_wbar = np.where(moved, np.log(np.abs(wbar)), self.log_wbar)
        flip, turn = moved & (w < 0), moved & (w * wbar < 0)
        return FlowState(log_w=log_w, log_wbar=log_wbar, swap=swap ^ turn, sign=np.where(flip, -sign, sign))


class FlowResult(AbstractFlowResult):
    """The gradient flow sampled at rescaled times ``ts``: the exact state and what follows from it.

    As diffrax's ``Solution``: the stored fields are the solution's exact state (``log w``, ``log w̄`` and
    the sign frame, see [`FlowState`][gradflow.FlowState]), the loss, the solver's ``stats`` and its
    ``result``; ``u, v, beta, b, alpha`` are computed from them. All arrays are NumPy (float64 unless
    stated). With a batch of ``B`` runs (``alpha``/``log_alpha`` given as an array, or a batch of start
    states) every field but ``ts`` gains a leading axis of length ``B``, and ``flow[i]`` is run ``i`` alone,
    ``flow[1:3]`` a smaller batch. A [`Trajectory`][gradflow.Trajectory].

    Attributes:
        ts: rescaled times ``τ = t / log(1/α)`` from the start, shape ``(m,)``.
        log_w, log_wbar: ``log w`` and ``log w̄``, shape ``(m, p)``: the exact state at every time
            (``+inf``, and the loss NaN, after the time a failed solve stopped at, see ``result``).
        swap, sign: the sign frame ``u0_i > |v0_i|``, shape ``(p,)`` (as in ``FlowState``).
        loss: ``L(θ)``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: the solver's statistics: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps``
            (arrays) and ``max_steps`` (the cap it ran under, ``None`` for none).
        result: ``"successful"``, ``"max_steps_reached"`` or ``"solver_failed"`` (the step size fell below
            the float64 resolution of ``t``, or a stage iteration failed; see ``message``) (a str array of shape
            ``()`` or ``(B,)``); with ``throw=True`` (the default) only successful results are returned.
        message: what went wrong, where (``""`` when successful), in the shape of ``result``.
    """

    log_w: np.ndarray
    log_wbar: np.ndarray
    swap: np.ndarray
    sign: np.ndarray

    @property
    def u(self) -> np.ndarray:
        """The weights ``u``, shape ``(m, p)``; 0 where below the float64 range."""
        return self._weights()[0]

    @property
    def v(self) -> np.ndarray:
        """The weights ``v``, shape ``(m, p)``; 0 where below the float64 range."""
        return self._weights()[1]

    @property
    def beta(self) -> np.ndarray:
        """``β = u ⊙ v``, shape ``(m, p)``."""
        u, v = self._weights()
        return u * v

    @property
    def weights(self) -> np.ndarray:
        """``β``, under the name every family's results share (the matrices ``W_j`` for full weights)."""
        return self.beta

    @property
    def b(self) -> np.ndarray:
        """Log-scale weights ``b = log w / log α`` (docs/math.md, *Rescaled time and log coordinates*), exact at
        every scale, shape ``(m, p)``."""
        return self.log_w / self.log_alpha[..., None, None]

    def _batched(self, field, leaf):
        """The sign frame is per run only where it is ``(B, p)``, not ``(p,)``."""
        return leaf.ndim == 2 if field in ("swap", "sign") else super()._batched(field, leaf)

    def _weights(self):
        return weights(self.log_w, self.log_wbar, self.swap[..., None, :], self.sign[..., None, :])

    def state_at(self, k: int) -> FlowState:
        """The exact state at the recorded time ``ts[k]`` (a batch of states for a batched result).

        ``simulate_flow(model, start=flow.state_at(k), log_alpha=flow.log_alpha, ts=flow.ts[k:] - flow.ts[k])``
        continues the flow: its times are measured from ``ts[k]``.
        """
        k = check_time_index(k, len(self.ts))
        return FlowState(log_w=self.log_w[..., k, :], log_wbar=self.log_wbar[..., k, :], swap=self.swap, sign=self.sign)


class GDResult(AbstractGDResult):
    """Discrete training recorded every ``record_every`` steps (all fields NumPy float64/int64).

    The stored fields are the state the optimizer updated, ``θ = (u, v)``, with the loss and the scale;
    ``ts``, ``beta`` and ``b`` are computed from them. With ``A`` scales every field but ``steps`` and
    ``lr`` gains a leading axis of length ``A`` (so do ``ts``, since ``τ`` depends on α). A
    [`Trajectory`][gradflow.Trajectory].

    Attributes:
        steps: the recorded step numbers ``0, record_every, …, steps``, shape ``(m,)``.
        u, v: the weights, shape ``(m, p)``.
        loss: the full-batch loss ``L(θ)``, shape ``(m,)``.
        log_alpha: ``log α``.
        alpha: ``α``, the float64 number the weights were started from, ``θ(0) = α (u0, v0)``.
        lr: the learning rate.
        result: ``"successful"``, or ``"non_finite"`` where the run diverged (see ``message``; its records after
            that step are NaN), shape ``()`` or ``(A,)``; with ``throw=True`` (the default) only successful
            results are returned.
        message: the step where the run became non-finite (``""`` when successful), in the shape of ``result``.
    """

    u: np.ndarray
    v: np.ndarray
    alpha: np.ndarray

    @property
    def beta(self) -> np.ndarray:
        """``β = u ⊙ v``, shape ``(m, p)``."""
        return self.u * self.v

    @property
    def weights(self) -> np.ndarray:
        """``β``, under the name every family's results share."""
        return self.beta

    @property
    def b(self) -> np.ndarray:
        """Log-scale weights ``log|w| / log α``, ``w = u + v`` up to the sign frame (as in
        [`FlowResult`][gradflow.FlowResult]); ``|w|`` is clipped to the smallest positive float64, so
        ``b`` stays finite. Shape ``(m, p)``."""
        return np.log(np.maximum(np.abs(self.u + self.v), _TINY)) / self.log_alpha[..., None, None]
