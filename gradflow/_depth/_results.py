"""The results of the depth family: the flow of a depth-L diagonal network sampled at output times, and its gradient
descent (docs/depth.md)."""

from __future__ import annotations

import numpy as np

from .._kit._trajectory import AbstractFlowResult, AbstractGDResult, time_unit

_TINY = np.finfo(np.float64).tiny


class DepthFlowResult(AbstractFlowResult):
    """The gradient flow of a [`DepthModel`][gradflow.DepthModel] sampled at rescaled times ``ts``.

    The stored state is every layer's ``log |w_l|`` and sign, exact at every scale (``log |w_l| = −1e4`` is legal);
    ``layers``, ``weights`` (``β``), ``b``, ``clock`` and ``alpha`` follow from it. With a batch of ``B`` scales every
    field but ``ts`` gains a leading axis of length ``B``, and ``flow[i]``, ``flow[1:3]`` select runs.

    Attributes:
        ts: rescaled times, ``τ = t α^{L−2}`` (L ≥ 3) or ``t / log(1/α)`` (L = 2), shape ``(m,)``.
        log_w: ``log |w_l|``, shape ``(m, L, p)`` (``+inf`` after the time a failed solve stopped at).
        sign: the sign of ``w_l``, shape ``(m, L, p)``.
        loss: ``L(θ)``, shape ``(m,)``.
        log_alpha: ``log α``.
        stats: ``num_steps``, ``num_accepted_steps``, ``num_rejected_steps``, ``switches`` (the changes of
            variable and of time variable: wakes, leaves, jumps settling) and ``max_steps``.
        result, message: as for every flow (``"successful"``, ``"max_steps_reached"``, ``"solver_failed"``,
            ``"interrupted"``; the message says where).
    """

    log_w: np.ndarray
    sign: np.ndarray

    @property
    def layers(self) -> np.ndarray:
        """The layers ``w_l``, shape ``(m, L, p)``; 0 where below the float64 range."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self.sign * np.exp(self.log_w)

    @property
    def beta(self) -> np.ndarray:
        """``β = w_1 ⊙ ⋯ ⊙ w_L``, shape ``(m, p)``."""
        with np.errstate(over="ignore", invalid="ignore"):
            return np.prod(self.sign, axis=-2) * np.exp(np.sum(self.log_w, axis=-2))

    @property
    def weights(self) -> np.ndarray:
        """``β``, under the name every family's results share."""
        return self.beta

    @property
    def b(self) -> np.ndarray:
        """``b = log |β|^{1/L} / log α``: 1 at the start of a balanced flow, 0 once a coordinate is learned."""
        depth = self.log_w.shape[-2]
        return np.sum(self.log_w, axis=-2) / depth / np.asarray(self.log_alpha)[..., None, None]

    @property
    def clock(self) -> np.ndarray:
        """The clocks ``c = (α/|β|^{1/L})^{L−2}`` (``L ≥ 3``), shape ``(m, p)``: what the greedy path's ``b_at(τ)``
        moves linearly; ``inf`` where ``β = 0``."""
        depth = self.log_w.shape[-2]
        log_a = np.sum(self.log_w, axis=-2) / depth
        with np.errstate(over="ignore"):
            return np.exp((depth - 2) * (np.asarray(self.log_alpha)[..., None, None] - log_a))


class DepthGDResult(AbstractGDResult):
    """Discrete training of a [`DepthModel`][gradflow.DepthModel] recorded every ``record_every`` steps: the layers
    ``w_l`` the optimizer updated, from ``w_l(0) = α u0[l]``, with the loss. With ``A`` scales every field but
    ``steps`` and ``lr`` gains a leading axis of length ``A`` (so does ``ts``).

    Attributes:
        steps: the recorded step numbers ``0, record_every, …, steps``, shape ``(m,)``.
        layers: the layers ``w_l``, shape ``(m, L, p)``.
        loss: the full-batch loss, shape ``(m,)``.
        log_alpha: ``log α``; alpha: ``α``, the float64 number the layers were started from.
        lr: the learning rate.
        result, message: ``"successful"``, or ``"non_finite"`` where the run diverged (its records after that step
            are NaN), as for every family's gradient descent.
    """

    layers: np.ndarray
    alpha: np.ndarray

    @property
    def depth(self) -> int:
        """``L``."""
        return int(self.layers.shape[-2])

    @property
    def ts(self) -> np.ndarray:
        """The rescaled times of the steps, ``τ = k · lr · α^{L−2}`` (``L ≥ 3``) or ``k · lr / log(1/α)`` (``L = 2``),
        shape ``(m,)`` (``(A, m)`` for ``A`` scales)."""
        return self.steps * self.lr * time_unit(self.depth, self.log_alpha)[..., None]

    @property
    def beta(self) -> np.ndarray:
        """``β = w_1 ⊙ ⋯ ⊙ w_L``, shape ``(m, p)``."""
        return np.prod(self.layers, axis=-2)

    @property
    def weights(self) -> np.ndarray:
        """``β``, under the name every family's results share."""
        return self.beta

    @property
    def _log_a(self) -> np.ndarray:
        """The layers' geometric mean ``log |β|^{1/L}``, ``|w_l|`` clipped to the smallest positive float64."""
        return np.mean(np.log(np.maximum(np.abs(self.layers), _TINY)), axis=-2)

    @property
    def b(self) -> np.ndarray:
        """``b = log |β|^{1/L} / log α``, as [`DepthFlowResult.b`][gradflow.DepthFlowResult]."""
        return self._log_a / np.asarray(self.log_alpha)[..., None, None]

    @property
    def clock(self) -> np.ndarray:
        """The clocks ``c = (α/|β|^{1/L})^{L−2}``, as [`DepthFlowResult.clock`][gradflow.DepthFlowResult]."""
        with np.errstate(over="ignore"):
            return np.exp((self.depth - 2) * (np.asarray(self.log_alpha)[..., None, None] - self._log_a))
