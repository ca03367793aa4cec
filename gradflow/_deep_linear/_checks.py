"""The scales float64 resolves in a deep linear network's flow (docs/deep-linear.md, *Supported range*)."""

from __future__ import annotations

import math

import numpy as np

from .._kit._checks import EPS, RESOLUTION, check_tolerances
from .._solver._controllers import UNDERFLOW

STIFFNESS = 0.04
"""The learned modes relax at rate ``‖J‖ = O(α^{−(L−2)})`` in ``τ`` (``L ≥ 3``), and the velocity carries ``‖J‖``
ulps of the learned entries. Where learned and sleeping modes share the entries (any start not aligned with the
data's bases), that rounding reaches the sleeping modes, undamped by the implicit stages: Newton's updates of a
stage stop at ``γ h ‖J‖ eps`` of its state, which caps the step at ``h ∝ (atol + rtol) / (eps ‖J‖)``, and the number
of steps grows as ``‖J‖``. The flow is solved while ``α^{L−2} ≥ STIFFNESS · eps / (atol + rtol)`` (``8.9e-10`` at
``atol = 1e-8``). Measured on Saxe's whitened 3×3 task (singular values 3, 2, 1, docs/deep-linear.md) rotated (its
singular bases and the start's hidden bases random) up to the last half-way time: solved at ``α^{L−2} = 9e-10``
(L = 4, α = 3e-5: 2,308 steps) and ``1e-8`` (L = 3: 1,117 steps), past 20,000 steps at ``1e-10`` (L = 4, α = 1e-5;
L = 3). From an aligned start (each mode in its own entries) the flow is solved further, down to the jumps' bound.
Before Newton stopped on the stage's state (``gradflow._solver.StageNewton``) this was ``40``: its stop on the
velocity failed every step of a settled flow."""

JUMP_STEP = 2e-3
"""The shortest step in ``t = τ α^{−(L−2)}`` that the jumps take (``L ≥ 3``, ``atol = 1e-8``), of which 100 ulps of
``τ`` (``gradflow._solver.UnderflowGuard``) must fit: ``τ_end α^{−(L−2)} ≤ JUMP_STEP / (100 eps) ≈ 9.0e10``.
Measured on the aligned whitened task up to the last half-way time: solved at L = 4, α = 1.5e-6 (``τ_end
α^{−2} = 2.3e11``), L = 5, α = 2e-4 (``5.3e10``), L = 6, α = 2e-3 (``2.5e10``); step-size underflow at the first jump
(``t ≈ 0.17 α^{−2}``) at L = 4, α = 1e-6, and at L = 5, α = 1e-4 and L = 6, α = 1e-3: the shortest step there
lies between 1.6e-3 and 3.7e-3 in ``t`` (L = 4)."""


SMALL = 1e-2
"""Below ``α = SMALL · (atol + rtol)`` (``L ≥ 3``) the flow is its α → 0 limit to the tolerance (gradflow/_deep_linear/
_small.py): the limit's stage times are off by ``C α``, ``C`` from 0.3 to 1.2 on the whitened tasks of
docs/deep-linear.md, and its jumps start where a layer's new direction reaches ``(atol + rtol)^{1/L} ≫ α``."""


SPLIT_LOWEST = 1e-13
"""Between the two ranges (``L ≥ 3``, outputs linear in ``W``) the flow is solved by the split of the layers into their
learned and sleeping parts (gradflow/_deep_linear/_split.py), down to ``α = SPLIT_LOWEST``: where ``α^{L−2}`` is
below ``1e-12`` its plateaus are held (gradflow/_deep_linear/_held.py), so that their length, ``α^{−(L−2)}`` in
``t``, no longer bounds it. Measured on Saxe's whitened 3×3 task rotated, from Gaussian starts, through every jump
(docs/deep-linear.md, *Held plateaus*): at α = 1e-13 and ``atol = 1e-11``, where the small-α path's range begins,
at L = 3 and 6 (L = 6: 19,788 steps), at α = 1e-14 and ``atol = 1e-12`` at L = 3, 4, 5 (L = 5: 25,862 steps), at
α = 1e-12 and ``atol = 1e-10`` at L = 3 to 6, and at α = 1e-10 and ``atol = 1e-8`` (L = 6: 3,486 steps). Until
2026-12-01 it stopped at α = 1e-9 at L = 6 (the held plateau after the first jump stiffened as α fell) and 1e-11 at
L = 4, 5, then at 1e-12; before the plateaus were held, at ``α^{L−2} = 1e-16``. At a tighter ``atol`` the small-α
path starts lower (below ``atol + rtol = 1e-11``: below 1e-13), and the scales between it and this floor are
refused."""


def small_log_alpha(rtol: float, atol: float) -> float:
    """The largest ``log α`` that the small-α path (``L ≥ 3``) takes: ``log(SMALL · (atol + rtol))``."""
    return math.log(SMALL * (atol + rtol))


def lowest_log_alpha(depth: int | None, tau_end: float, rtol: float, atol: float) -> float:
    """The smallest ``log α`` whose flow float64 resolves at the tolerances up to ``τ_end``, the largest of:

    - the sleeping layers' scale: the state is the layers in units of α, ``Ŵ_l = W_l/α``, of order 1 while asleep and
      ``|W_l|/α`` once learned, in the same matrices; float64 resolves a sleeping entry next to a learned one to
      ``eps/α``, at most ``(atol + rtol)/RESOLUTION``;
    - the stiffness of the learned modes (``L ≥ 3``, :data:`STIFFNESS`);
    - the jumps: ``O(α^{L−2})`` wide in ``τ = t α^{L−2}`` (``L ≥ 3``), where the steps must exceed 100 ulps of ``τ``
      (:data:`JUMP_STEP`).

    At ``L = 2`` (``τ = t/log(1/α)``) the jumps are ``O(1/log(1/α))`` wide and only the first bound applies; it is
    also the bound for every depth (``depth=None``), which the entry points check before they know the model.
    """
    tol = atol + rtol
    log_scale = math.log(RESOLUTION * EPS / tol)
    if depth is None or depth == 2:
        return log_scale
    log_stiff = math.log(STIFFNESS * EPS / tol) / (depth - 2)
    log_jump = math.log(max(tau_end, 1.0) * UNDERFLOW * EPS / JUMP_STEP) / (depth - 2)
    return max(log_scale, log_stiff, log_jump)


def check_resolved(
    depth: int | None, log_a, ts, *, rtol: float, atol: float, linear: bool = True, names=("alpha", "log_alpha")
) -> None:
    """Refuse, with the supported range in the message, the scales ``log α`` that no path resolves at the tolerances
    and the output times ``ts`` (or None: ``τ_end = 1``), for the model's ``depth`` (None: the bound of every depth;
    the flow checks its depth's before it solves anything): below the direct integration's range
    (:func:`lowest_log_alpha`), and for ``L ≥ 3`` (or None) above the small-α path's (:func:`small_log_alpha`) and
    below the split's (:data:`SPLIT_LOWEST`, for outputs ``linear`` in ``W`` only)."""
    check_tolerances(rtol, atol)
    log_a = np.atleast_1d(np.asarray(log_a, dtype=np.float64))
    tau_end = 1.0 if ts is None else float(np.max(ts))
    lowest, small = lowest_log_alpha(depth, tau_end, rtol, atol), small_log_alpha(rtol, atol)
    split = lowest
    if linear and depth != 2:  # depth None: what every depth refuses
        split = min(lowest, math.log(SPLIT_LOWEST))
    below = (log_a < lowest) & (((log_a > small) & (log_a < split)) | (depth == 2))
    if not np.any(below):
        return
    la = float(log_a[below][0])
    if depth == 2:
        where = (
            f"It takes log α ≥ {lowest:.4g} (α ≥ {math.exp(lowest):.3g}) here (a looser atol widens the range); "
            "for smaller α use a FactorizedModel (W = U Vᵀ with U = W_2, V = W_1ᵀ), whose flow takes any α"
        )
    elif linear:
        where = (
            f"It takes log α ≥ {split:.4g} (α ≥ {math.exp(split):.3g}; by the direct integration down to α = "
            f"{math.exp(lowest):.3g}, below it by the split of the layers into their learned and sleeping parts), or "
            f"log α ≤ {small:.4g} (α ≤ {math.exp(small):.3g}), where the flow is its α → 0 limit to the tolerance; the "
            f"scales between are not covered yet (with atol + rtol ≥ {SPLIT_LOWEST / SMALL:.0e} the two ranges meet)"
        )
    else:
        where = (
            f"It takes log α ≥ {lowest:.4g} (α ≥ {math.exp(lowest):.3g}), by the direct integration, or log α ≤ "
            f"{small:.4g} (α ≤ {math.exp(small):.3g}), where the flow is its α → 0 limit to the tolerance; the split "
            "of the layers that covers scales between takes outputs h(x, W) linear in W (with any loss, as in every "
            "built-in task), which this model's are not"
        )
    raise ValueError(
        f"{names[1]} = {la:.6g} (α = {math.exp(la):.3g}) is below what float64 resolves for a deep linear network of "
        f"depth L = {depth or 'L'} at atol = {atol:g}, rtol = {rtol:g}, up to τ = {tau_end:.6g}: gradflow integrates "
        "the layers in units of α, where a sleeping entry (of order 1) sits next to learned ones (of order 1/α) that "
        f"relax at rate α^−(L−2). {where} (docs/deep-linear.md, Supported range)."
    )


DENSE_BYTES = 2**31
"""The split of the layers (gradflow/_deep_linear/_split.py) holds ``G``'s derivative as coefficients: ``K = ∂G/∂W``,
``(m n)²`` numbers, or ``M = ∂z/∂W``, ``m n`` per output (for the square loss the smaller), except where
``G = G0 − W C`` (the square loss of outputs ``W x`` or ``W``: ``n²``) or the outputs are ``W x_j`` (any loss: the
``N`` inputs, ``N n``); with ``DeepLinearSolver(newton="dense")`` it also solves Newton's equations with the dense
Jacobian of twice the layers' entries. Above this many bytes for the two together the scales on the split are
refused before anything runs (docs/deep-linear.md, *Supported range*)."""


def check_size(model, log_a, split, *, free: bool, coefficients: int, rtol: float, atol: float) -> None:
    """Refuse, saying what takes the model instead, the scales ``log_a`` on the split (``split``, a mask) where its
    ``coefficients`` (bytes) and, unless ``free`` (matrix-free), its dense Jacobian exceed :data:`DENSE_BYTES`."""
    if not np.any(split):
        return
    unknowns = 2 * sum(a * b for a, b in model.layer_shapes)
    jacobian = 0 if free else 8 * unknowns**2
    if coefficients + jacobian <= DENSE_BYTES:
        return
    la = float(np.atleast_1d(log_a)[np.atleast_1d(split)][0])
    if coefficients + 8 * unknowns <= DENSE_BYTES:  # the dense Jacobian is what does not fit
        why = (
            f"with the dense Jacobian of {unknowns:,} unknowns ({jacobian / 2**30:.1f} GiB), as "
            'solver=DeepLinearSolver(newton="dense") asks. DeepLinearSolver(newton="matrix_free") (or "auto", the '
            "default) solves Newton's equations matrix-free and takes this model at any size"
        )
    else:
        tau_end = 1.0
        lowest, small = lowest_log_alpha(model.depth, tau_end, rtol, atol), small_log_alpha(rtol, atol)
        why = (
            f"which holds G's derivative as {coefficients / 2**30:.1f} GiB of coefficients (outputs W x_j, or W itself "
            f"with the square loss, need almost none). Here simulate_flow takes log α ≥ {lowest:.4g} (α ≥ "
            f"{math.exp(lowest):.3g}, to τ = 1) by the direct integration and log α ≤ {small:.4g} (α ≤ "
            f"{math.exp(small):.3g}) by the small-α path, at any size and these tolerances; simulate_gd runs gradient "
            "descent at any α"
        )
    raise ValueError(
        f"log_alpha = {la:.6g} (α = {math.exp(la):.3g}) asks for the exact flow of a deep linear network with "
        f"{unknowns // 2:,} layer entries between the direct integration's range and the small-α path's, by the split "
        f"of the layers, {why} ({DENSE_BYTES / 2**30:.0f} GiB at most; docs/deep-linear.md, Supported range)."
    )
