"""Input checks shared by the theory engine: integers, vectors, scales, output times, degenerate initialisations.

Every check raises a ``ValueError`` (a ``TypeError`` for a value of the wrong type) that says what was wrong
and how to fix it, and returns the validated value (Python ints, NumPy float64 arrays).

**Degenerate initialisations** (paper Assumption 4.2, first clause; docs/math.md, *Small initialisation and
the conservation law*). The flow conserves ``u_i² − v_i²``; with ``|u0_i| = |v0_i|`` it pins ``u_i = ±v_i``
for all time, ``w̄_i = 0`` and the log-coordinate flow and the greedy limit do not apply: an error. A
*near*-degenerate coordinate, ``gap_i = ||u0_i| − |v0_i|| / max(|u0_i|, |v0_i|) ≤ NEAR_DEGENERATE``, is
solved exactly, but one of ``w_i, w̄_i`` starts at ``α·gap_i`` times its usual size, so ``log_α`` of it starts
at ``1 + log(1/gap_i)/log(1/α)`` instead of the limit's ``b⁰ = 1``: the greedy limit describes the flow only
when ``log(1/α) ≫ log(1/gap_i)``. That is an ``AssumptionWarning`` saying which ``log(1/α)`` it needs. For
factorised weights the same holds for the columns of ``[U_j; V_j]`` (``gradflow._factorized._model.check_factors``):
rank-deficient is an error, ``σ_min/σ_max ≤ NEAR_DEGENERATE`` the warning.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence

import jax.numpy as jnp
import numpy as np

from .._data import check_data, check_h, check_loss, check_output
from ._assumptions import AssumptionWarning, warn

PAPER_ALPHAS = (0.1, 0.01, 1e-4, 1e-8, 1e-16, 1e-32)
"""The paper's initialisation scales (its Figures 6–10): the default α of the commands and of the toy task's demo."""

NEAR_DEGENERATE = 1e-6
"""The relative gap ``||u0_i| − |v0_i|| / max(|u0_i|, |v0_i|)`` at or below which an initialisation is
near-degenerate. At ``1e-6``, ``log(1/gap) = 13.8``: the start of ``log_α w_i`` (or ``log_α w̄_i``) is off the
limit's ``b⁰ = 1`` by ``13.8 / log(1/α)``, 0.19 at ``α = 1e-32``, which visibly moves the stage times. Gaussian
directions (the built-in tasks) come this close with probability about ``p · 1e-6``."""

_NEAR_DEGENERATE = "near-degenerate initialisation"  # how the warning starts (see init_checked)

LOG_ALPHA_MAX = -math.sqrt(float(np.finfo(np.float64).eps))
"""The largest ``log α`` gradflow takes, ``−√eps ≈ −1.49e-8`` (``α ≤ 1 − 1.49e-8``; docs/floating-point.md, *Scales
close to 1*). The rescaled time ``τ = t / log(1/α)`` carries the relative error ``eps / |log α|`` of ``log(1/α)``
(from ``α``), and the solver, stepping in ``t``, cannot take steps below 100 ulps of ``t`` (``2.2e-14`` for
``t ≤ 1``, i.e. ``2.2e-14 / |log α|`` in ``τ``): at ``|log α| = √eps`` the rescaled time keeps half of float64's
digits, and closer to 0 it cannot be resolved."""


RESOLUTION = 10.0
"""A flow's state in log coordinates must be resolved by float64 to a tenth of the tolerance: its spacing at the
largest ``|y|`` the state reaches, at most ``eps·|y|``, must be at most ``(atol + rtol) / RESOLUTION``, the
tolerance of an awake coordinate (``|log w| ≈ 1``) over ``RESOLUTION`` (docs/floating-point.md, *Scales far below
float64*). Rounding ``y`` moves an awake weight ``w̄ = exp(log(w w̄) − y)`` by ``eps·|y|`` relative, whatever ``rtol``:
on the toy at ``atol = 1e-8`` the step count grows by a third when that spacing is a third of ``atol``
(``log α = −1e7``), and the solve stalls when it exceeds ``atol`` (``log α = −1e8``)."""

EPS = float(np.finfo(np.float64).eps)  # float64's machine epsilon, 2⁻⁵²

T_MAX = 0.1 / (100.0 * EPS)
"""The longest unscaled time ``t = τ log(1/α)`` a flow is solved to, ``≈ 4.5e12`` (docs/floating-point.md, *Long
times*): the solver's steps must be longer than 100 ulps of ``t`` (its guard against step-size underflow), and a
jump, which moves on a time scale of order 1 in ``t``, needs steps of about 0.1: at ``t = T_MAX`` the shortest step
is 0.1. Far beyond, rounding errors of ``g``, integrated over ``t``, move the sleeping coordinates (on the diagonal
linear task from ``α = e^{−20}``, the converged loss 5e-29 at ``t = 2e11`` became 4.5 at ``t = 5e15``)."""


def max_state(rtol: float, atol: float) -> float:
    """The largest ``|y|`` of a state in log coordinates that float64 resolves at ``rtol, atol`` (see
    :data:`RESOLUTION`): ``(atol + rtol) / (RESOLUTION · eps)``, ``4.5e6`` at ``atol = 1e-8``."""
    return (atol + rtol) / (RESOLUTION * EPS)


def check_log_range(log_a, ts, *, rtol: float, atol: float, names, reach: float, state: str, flow: str) -> None:
    """Refuse, with the supported range in the message, the scales ``log α`` whose flow float64 cannot resolve at the
    tolerances, and output times ``ts`` (or None) it cannot step to (:func:`check_long_times`): the flow's state in
    log coordinates, ``state`` (``"log w"``), reaches ``reach · |log α|``, so gradflow takes
    ``log α ≥ −max_state(rtol, atol) / reach`` (:func:`max_state`). ``flow`` names the flow in the message (``"the
    flow"``), ``names`` the arguments (the scales given as ``alpha`` or ``log_alpha``)."""
    check_tolerances(rtol, atol)
    log_a = np.atleast_1d(np.asarray(log_a, dtype=np.float64))
    lowest = -max_state(rtol, atol) / reach
    below = log_a < lowest
    if np.any(below):
        la = float(log_a[below][0])
        size = "|log α|" if reach == 1 else f"{reach:g}·|log α|"
        raise ValueError(
            f"{names[1]} = {la:.6g} is below what float64 resolves at atol = {atol:g}, rtol = {rtol:g}: {flow}'s "
            f"state {state} reaches {size} = {reach * -la:.3g}, which float64 resolves to {EPS * reach * -la:.2g} "
            f"(eps·|{state}|), more than a tenth of atol + rtol. gradflow takes log α ≥ {lowest:.3g} at these "
            "tolerances (the range grows with atol + rtol) (docs/floating-point.md, Scales far below float64)."
        )
    check_long_times(log_a, ts)


MAX_TOLERANCE = 1e-2  # a step's error in log w of 1% of a weight: beyond, the flow is not resolved at all


def check_tolerances(rtol: float, atol: float) -> None:
    """The flow's tolerances: numbers in ``[0, MAX_TOLERANCE]``, not both 0. ``atol`` is the relative accuracy of the
    weights per step; ``atol = 1e3`` "succeeded" with a loss curve unlike the flow's."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name} must be a number; got {type(value).__name__}.")
        if not 0.0 <= value <= MAX_TOLERANCE:
            raise ValueError(
                f"{name} must lie in [0, {MAX_TOLERANCE:g}] (the error per step of log w, i.e. the relative error of the "
                f"weights); got {name}={value!r}. The default atol is 1e-8."
            )
    if rtol + atol == 0:
        raise ValueError("rtol and atol must not both be 0: give atol > 0 (the default is 1e-8).")


def check_pair(u0, v0) -> None:
    """A ``ValueError`` unless both of the initialisation's halves ``u0, v0`` are given, or neither (a greedy limit
    takes none: only ``b^0 = 1`` enters it)."""
    if (u0 is None) != (v0 is None):
        raise ValueError("give both u0 and v0, or neither.")


def check_long_times(log_a, ts) -> None:
    """Refuse, with the supported range in the message, output times ``ts`` (or None) beyond what float64 can step
    the flow to at the scales ``log_a``: ``ts[-1] · log(1/α) ≤ T_MAX``."""
    if ts is None:
        return
    log_a = np.atleast_1d(np.asarray(log_a, dtype=np.float64))
    t_end = float(np.max(ts)) * -log_a
    long = t_end > T_MAX
    if np.any(long):
        la, tau = float(log_a[long][0]), float(np.max(ts))
        raise ValueError(
            f"ts reaches τ = {tau:.6g}, too long at log α = {la:.6g}: the unscaled time t = τ log(1/α) = "
            f"{tau * -la:.3g} is beyond the {T_MAX:.3g} float64 can step the flow to (its steps must be longer "
            f"than 100 ulps of t). gradflow takes τ ≤ {T_MAX / -la:.3g} at this α (docs/floating-point.md, "
            "Long times)."
        )


def check_int(value, name: str, *, minimum: int = 1) -> int:
    """An integer (not a bool) ``≥ minimum``, as a Python int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = {0: "non-negative", 1: "positive"}.get(minimum, f">= {minimum}")
        raise ValueError(f"{name} must be a {kind} integer; got {value!r}.")
    return int(value)


def check_vector(x, p: int, name: str, *, allow_batch: bool = False) -> np.ndarray:
    """A finite float vector of length ``p`` (or a stack of them, shape ``(..., p)``), as float64."""
    if x is None:
        raise ValueError(f"give {name}, an array of shape ({p},) (the model's p = {p}).")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of numbers; got {type(x).__name__}.") from err
    ok = arr.shape[-1:] == (p,) and (arr.ndim == 1 or allow_batch)
    if not ok:
        want = f"(..., {p})" if allow_batch else f"({p},)"
        raise ValueError(f"{name} must have shape {want} to match the model's p={p}; got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf at index {np.argwhere(~np.isfinite(arr))[0].tolist()}.")
    return arr


def check_scales(alpha, log_alpha, *, names: tuple[str, str] = ("alpha", "log_alpha")) -> tuple[np.ndarray, bool]:
    """Exactly one of ``alpha`` in (0, 1) and ``log_alpha`` < 0, each a scalar or a 1-D array.

    ``names`` are the two arguments' names in the messages. Returns ``(log α, batched)``: ``log α`` as a
    float64 array of the input's shape, and whether a 1-D array (a batch of scales) was given.
    """
    if (alpha is None) == (log_alpha is None):
        raise ValueError(f"give exactly one of {names[0]} (in (0, 1)) or {names[1]} (< 0, for scales below float64).")
    name, value = (names[0], alpha) if log_alpha is None else (names[1], log_alpha)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a number or a 1-D array of numbers; got {type(value).__name__}.") from err
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"{name} must be a scalar or a non-empty 1-D array of scales; got shape {arr.shape}.")
    if log_alpha is None:
        bad = ~((arr > 0) & (arr < 1))
        if np.any(bad):
            raise ValueError(
                f"{name} must lie in (0, 1); got {float(arr[bad].ravel()[0])!r}. For scales below the float64 range "
                f"(α < 1e-308) pass {names[1]} instead."
            )
        log_a = np.log(arr)
    else:
        bad = ~(np.isfinite(arr) & (arr < 0))
        if np.any(bad):
            raise ValueError(f"{name} must be finite and negative (α in (0, 1)); got {float(arr[bad].ravel()[0])!r}.")
        log_a = arr
    close = log_a > LOG_ALPHA_MAX
    if np.any(close):
        got = repr(float(arr[close].ravel()[0]))
        if log_alpha is None:
            got += f", log α = {float(log_a[close].ravel()[0]):.3g}"
        raise ValueError(
            f"{name} is too close to {'1' if log_alpha is None else '0'}: got {got}. The rescaled time τ = t / log(1/α) "
            f"cannot be resolved in float64 for |log α| < {-LOG_ALPHA_MAX:.3g}; gradflow takes log α ≤ "
            f"{LOG_ALPHA_MAX:.3g} (α ≤ 1 − {-LOG_ALPHA_MAX:.3g}) (docs/floating-point.md, Scales close to 1)."
        )
    return log_a, arr.ndim == 1


def check_depth_demo(model: str, model_options, depths, *, tasks, allowed, family: str) -> None:
    """A demo over depths: ``model`` a built-in task of the ``family`` (``tasks``), the depth not among its
    ``model_options`` (the demo sets it), and ``depths`` a non-empty tuple of the family's ``allowed`` depths."""
    if model not in tasks:
        raise ValueError(
            f"model must be a built-in task of the {family} family, one of {sorted(tasks)}; got {model!r}."
        )
    if "depth" in dict(model_options):
        raise ValueError("give the depths as depths=(...), not as a model option.")
    if not depths or any(d not in allowed for d in depths):
        raise ValueError(f"depths must be a non-empty tuple of depths in {allowed}; got {depths!r}.")


def check_times(ts) -> np.ndarray:
    """Rescaled output times: 1-D, finite, ``ts[0] ≥ 0``, strictly increasing."""
    arr = np.asarray(ts, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of rescaled times τ; got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError("ts contains NaN or inf.")
    if arr[0] < 0:
        raise ValueError(f"ts must start at τ >= 0 (the flow starts at τ = 0); got ts[0] = {float(arr[0])!r}.")
    if np.any(np.diff(arr) <= 0):
        k = int(np.argmax(np.diff(arr) <= 0))
        raise ValueError(
            f"ts must be strictly increasing; got ts[{k}] = {float(arr[k])!r} >= ts[{k + 1}] = {float(arr[k + 1])!r}."
        )
    return arr


def check_coordinate_model(h, X, Y, *, p, loss, names) -> tuple[np.ndarray, np.ndarray, int, tuple[str, ...]]:
    """The checks of a model ``h(x; β)`` of ``p`` coordinates ``β`` on the sample ``(X, Y)``: ``h`` a function,
    ``p`` a positive integer, the ``loss`` and the data (``gradflow._data``), one name per coordinate (None:
    ``β[i]``), and ``h`` at the first sample and ``β = 0``, whose output must fit ``Y``. Returns ``(X, Y, p, names)``
    as the model keeps them (``X``, ``Y`` float64 NumPy)."""
    if not callable(h):
        raise TypeError(f"h must be a function h(x, beta); got {type(h).__name__}.")
    p = check_int(p, "p")
    check_loss(loss)
    X, Y = check_data(X, Y, loss)
    names = tuple(f"β[{i}]" for i in range(p)) if names is None else tuple(str(s) for s in names)
    if len(names) != p:
        raise ValueError(f"names must have one label per coordinate (p={p}); got {len(names)}.")
    out = check_h(
        h,
        X[0],
        jnp.zeros(p),
        what="h(x, beta)",
        hint=f"Check that h takes a single sample (not the batch) and a beta of shape ({p},) (p = {p}).",
    )
    check_output(out, Y, loss, "h(x, beta)")
    return X, Y, p, names


def describe_coordinates(idx, names: Sequence[str] | None) -> str:
    """The coordinates ``idx`` for a message, with their ``names`` (the first 8) if given."""
    idx = [int(i) for i in idx]
    if names is None:
        return f"coordinates {idx}"
    shown = ", ".join(names[i] for i in idx[:8]) + (f" and {len(idx) - 8} more" if len(idx) > 8 else "")
    return f"coordinates {idx} ({shown})"


AHEAD = 10.0 ** np.arange(-16.0, -3.0)
"""The steps (in unscaled time) at which a run that stopped is probed ahead along its flow for a point where the model is
not finite: a solver shrinks its step onto such a point and stops within a tiny step of it; farther ahead than 1e-4
lies another stretch of the flow, not the cause."""


def non_finite_at(loss: float, bad, weights: str, size: float) -> str:
    """For a message: at finite weights (``weights``, in words, of largest entry ``size``) the loss is ``loss`` and
    ``g = −∇L`` is not finite in ``bad`` (the coordinates or weight matrices, in words)."""
    return f"at finite weights ({weights}; max |entry| = {size:.3g}) the loss is {loss:.6g} and g = −∇L is not finite in {bad}"


def degenerate_error(what: str, idx, fix: str, names: Sequence[str] | None = None) -> ValueError:
    """The error for ``|u_i| = |v_i|``: ``what`` holds at the coordinates ``idx``; ``fix`` says what to do."""
    return ValueError(
        f"{what} at {describe_coordinates(idx, names)}: the degenerate case of the paper's Assumption 4.2. The conservation "
        "law then pins u_i = ±v_i for all time (w̄ = 0: the log-coordinate flow is singular and the greedy limit "
        f"does not apply). {fix}"
    )


def warn_near_degenerate(what: str, gap: float, fix: str) -> None:
    """The ``AssumptionWarning`` of a near-degenerate initialisation (see the module): ``what`` is near-degenerate
    and starts at ``α·gap``; ``fix`` says what to do."""
    need = math.log(1.0 / gap)
    warn(
        f"{_NEAR_DEGENERATE} (Assumption 4.2): {what}, so the greedy limit describes the flow from α (u0, v0) only "
        f"for log(1/α) ≫ log(1/gap) = {need:.3g} (α ≪ {math.exp(-need):.3g}). {fix}"
    )


@contextlib.contextmanager
def init_checked() -> Iterator[None]:
    """Inside, the checks of initialisations (e.g. ``gradflow._diagonal._checks.check_init``) do not warn again: for a caller that has checked the initialisation itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NEAR_DEGENERATE, category=AssumptionWarning)
        yield


PROBES = 4  # the recorded times at which compare_limits checks a run's loss against the model's


def probe_times(loss) -> np.ndarray:
    """``PROBES`` indices of a run's recorded times (repeated where it has fewer) at which its loss is checked
    against the model's (:func:`check_losses`): the first, and others spread up to its last finite loss. At
    ``θ(0) ≈ 0`` every model with the same outputs ``Y`` has the same loss, so the first time alone does not tell
    another model's run (other ``X`` or ``h``) from this model's; the later ones, where ``θ`` has moved, do."""
    finite = np.flatnonzero(np.isfinite(np.asarray(loss)))
    if finite.size == 0:
        return np.zeros(PROBES, dtype=int)
    return finite[np.linspace(0, finite.size - 1, PROBES).round().astype(int)]


def check_losses(recorded, computed, what: str) -> None:
    """``what`` (a path's stages, or runs at their recorded times) records the loss ``recorded`` where ``model``'s loss
    is ``computed``: else they belong to another model of the same shapes (other data or ``h``), whose distances to
    this model's limit would mean nothing."""
    recorded, computed = np.asarray(recorded, dtype=np.float64), np.asarray(computed, dtype=np.float64)
    ok = np.isfinite(recorded)
    scale = np.maximum(np.abs(computed), np.max(np.abs(computed[ok]), initial=0.0) * 1e-9 + 1e-300)
    bad = ok & ~(np.abs(recorded - computed) <= 1e-6 * scale)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(
            f"{what} records the loss {recorded[i]:.10g} where this model's loss is {computed[i]:.10g}: they are another "
            "model's (other data or h, of the same shapes). Compute them with this model (greedy_limit, simulate_flow), "
            "or leave path and flows None."
        )
