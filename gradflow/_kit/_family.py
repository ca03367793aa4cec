"""The interface every model family implements (docs/extending.md).

A family is a kind of model — diagonal weights ``h(x; u ⊙ v)``, factorised weights ``W_j = U_j V_jᵀ`` — with its
exact flow, gradient descent, greedy limit and comparison, and the surface the apps show: its solver options, its
built-in tasks with their command-line and sweep options, its tables and figures, and its ``gradflow compare``
pipeline. The public entry points (``simulate_flow``, ``simulate_gd``, ``greedy_limit``, ``compare_limits``) do the
checks that every family shares, then look the family up from the model's exact type (``gradflow._registry``) and
call it with checked arguments; the command line, the demo and the sweep loop over the registered families. A
family imports the solver kit and the family kit below it, never the entry points, the registry or another family.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ._greedy import AbstractGreedyPath
from ._report import stage_time_rows
from ._task import Builtin

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclasses.dataclass(frozen=True)
class FlowRequest:
    """What ``simulate_flow`` asks of a family's flow once the checks every family shares are done: the output times
    ``ts``, the start (``u0, v0``, or ``start`` for a family that can continue a flow), the scales ``log_a`` (one, or a
    batch if ``batched``), the tolerances, the step cap, how a batch is solved (``batching``) and whether to show a
    progress bar."""

    ts: Any
    u0: Any
    v0: Any
    start: Any
    log_a: Any
    batched: bool
    rtol: float
    atol: float
    max_steps: int | None
    batching: str
    progress: bool = False


class ModelFamily(abc.ABC):
    """A model family: the model type it serves, what the entry points need of it, and the surface the command
    line, the demo and the sweep show for it (its class attributes). An instance is its entry in
    ``gradflow._registry.FAMILIES``.

    Arguments named as in the public entry points have been checked there: ``ts`` (rescaled times), ``log_a``
    (``log α``, a float64 array, 1-D when ``batched``), ``max_steps`` (None or a positive int), ``rtol``/``atol``,
    ``lr``, ``steps``/``record_every``, ``tolerances`` and ``max_stages``. The initialisation (``u0, v0``) is the
    family's to check.
    """

    name: ClassVar[str]
    """How the command line, the sweep's tables and the built-in tasks' ``family`` name the family."""
    model_type: ClassVar[type]
    """The model type the family serves: ``gradflow._registry.family_of`` finds the family from ``type(model)``
    (or its nearest registered base class)."""
    solver_type: ClassVar[type]
    """The class of its solver options (``simulate_flow(..., solver=solver_type(...))``; ``solver_type()`` is the
    default): an immutable object whose fields are checked on construction."""
    tasks: ClassVar[Mapping[str, Builtin]]
    """Its built-in tasks by name (``gradflow.models.TASKS`` gathers every family's)."""
    size_options: ClassVar[Mapping[str, str]]
    """The command line's size options of its tasks (``--n`` for ``n``), with their help."""
    teacher_options: ClassVar[Mapping[str, str]] = MappingProxyType({})
    """The command line's options that set its tasks' teacher (lists of positive numbers), with their help."""
    pipeline: ClassVar[str | None] = None
    """Where its ``gradflow compare`` pipeline is, ``"module:attribute"`` (a ``gradflow._demo.Pipeline``): it runs
    the entry points, so it lies above them and the family only names it; None: the command line has none."""
    worst_columns: ClassVar[tuple[tuple[str, str], ...]]
    """The quantities of its comparison's worst-distance table, ``(quantity, label)``: what ``comparison.worst``
    and ``comparison.summary()`` take."""
    weights_column: ClassVar[str]
    """The name of the weights' distance in its comparison's tables (``beta`` for ``beta_distance``): tables keep
    the names they had before the quantity was called ``"weights"``."""

    @abc.abstractmethod
    def check_init(self, model, u0, v0) -> tuple[Any, Any]:
        """The initialisation ``(u0, v0)``, checked (an error for a bad shape or a degenerate one, an
        ``AssumptionWarning`` for a near-degenerate one)."""

    @abc.abstractmethod
    def flow(self, model, request: FlowRequest, solver):
        """The exact flow of ``request`` (a result with ``result`` and ``message`` per run; ``throw`` is the
        caller's), with a progress bar if ``request.progress``; Ctrl-C ends it with the runs it stopped
        ``interrupted`` (see ``gradflow._solver.run_segments``). ``solver``: a ``solver_type``."""

    @abc.abstractmethod
    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        """Refuse (a ``ValueError`` that states the supported range) the scales ``log_a`` and output times ``ts`` (or
        None) that float64 cannot resolve with this family's flow at the tolerances, before any run (the range of
        its state in log coordinates, and ``gradflow._kit._checks.check_long_times``). ``names`` are the
        arguments' names in the messages."""

    @abc.abstractmethod
    def gd(self, model, *, u0, v0, log_a, alphas, batched, lr, steps, record_every, optimizer, batch_size, seed):
        """Discrete training from ``α (u0, v0)``, recorded every ``record_every`` steps."""

    @abc.abstractmethod
    def greedy(self, model, *, u0, v0, max_stages, tolerances, check_assumptions, seed, progress, checkpoint=None):
        """The greedy limit (a path with ``result`` and ``message``), keeping its finished stages in the file
        ``checkpoint`` (and resuming from it) if given."""

    @abc.abstractmethod
    def check_path(self, model, path) -> None:
        """A ``TypeError`` unless ``path`` is a greedy path of this family, a ``ValueError`` unless it has the
        model's shapes (before ``compare_limits`` runs any flow)."""

    @abc.abstractmethod
    def compare(self, model, path, runs, log_alphas, *, method: str, delta, threshold: float):
        """The distances of ``runs`` (one per ``log_alphas``) to the greedy ``path``, per stage window."""

    # What the command line and the demo show.

    @abc.abstractmethod
    def describe_model(self, model) -> str:
        """The model's sizes in a few words, for the command line."""

    @abc.abstractmethod
    def first_stage_speed(self, model) -> float:
        """``1 / T_1``, the speed of the first stage from ``θ = 0`` (0 if nothing moves)."""

    @abc.abstractmethod
    def describe_flow(self, flow, names: Sequence[str]) -> str:
        """A few words on a finished run for the command line (its final loss and what it learned)."""

    @abc.abstractmethod
    def flow_figures(self, flows, model, *, title: str, folder: Path) -> list[Path]:
        """Draw ``flows`` (one per α) into ``folder``; returns the files."""

    @abc.abstractmethod
    def greedy_summary(self, path, names: Sequence[str]) -> str:
        """The greedy path as a Markdown table, with its end and its warnings."""

    def activated(self, path, names: Sequence[str], k: int) -> str:
        """What stage ``k ≥ 1`` of the greedy ``path`` activated, by name (a coordinate, a weight matrix): the
        ``names`` entry its ``activated`` field gives."""
        return names[int(path.activated[k - 1])]

    def stage_rows(self, comparison) -> tuple[list[str], list[list[Any]]]:
        """The table (header, rows) of the greedy stage times against those detected on every run: one column per
        run (a family that detects its stages otherwise, e.g. rank jumps per weight matrix, writes its own)."""
        return stage_time_rows(comparison)

    def time_unit(self, model, log_alpha) -> float:
        """``dτ/dt`` at ``log α``, the rescaled time per unit of time (``τ = step · lr · dτ/dt`` for gradient
        descent): ``1 / log(1/α)``, unless the family's clock differs."""
        return 1.0 / -float(log_alpha)

    shards_models: ClassVar[bool] = False
    """Whether :meth:`solve_sharded` solves the flows of many models together (else a sweep solves them alone)."""

    # What gradflow.plot draws and gradflow.report writes, from the family's results alone.

    result_types: ClassVar[tuple[type, ...]]
    """The family's results (flows, gradient descents, greedy paths, comparisons): ``gradflow.plot`` and
    ``gradflow.report`` find the family of what they are given from its type."""

    convergence_labels: ClassVar[dict[str, str]]
    """The legend entry of every quantity of the family's comparisons (``"weights"``, ``"b"``, ``"loss"``,
    ``"time"``) in the convergence figure."""

    @abc.abstractmethod
    def plot(self, quantity: str, runs: Sequence, path, *, names: Sequence[str] | None, title: str) -> Figure:
        """The figure of ``quantity`` (``"weights"``: the weights or their singular values; ``"b"``: their log
        scales) against rescaled time for ``runs`` (single runs, one per α), the greedy ``path`` (or None) dashed
        over them; ``names``: the model's (None: numbered)."""

    @abc.abstractmethod
    def comparison_report(self, comparison) -> tuple[str, dict]:
        """A comparison (with its ``path``) as Markdown, the greedy path, stage times and distance tables, and as
        JSON-ready data."""

    def solve_sharded(self, tasks, log_alphas, tss, **options):
        """The flows of many tasks of one shape in one ``vmap``-ed call sharded over devices (the sweep's batches);
        families that cannot batch models say so."""
        raise NotImplementedError(f"sweeps batch the flows of {self.name} models only one run at a time.")


def check_path_of(model, path, cls: type, fields: Sequence[str], shapes: Callable, model_shapes: str) -> None:
    """``path`` is a greedy path of ``model``'s family: a ``cls``, or (as for trajectories) any object with the
    ``fields`` its comparison reads that is no other family's path; and ``shapes(path)``, its shapes in words, are
    ``model_shapes``. Else the error, with how to compute the model's own path."""
    own = "compute it with greedy_limit(model, u0=u0, v0=v0), or leave path=None"
    missing = [f for f in fields if not hasattr(path, f)]
    if missing or (isinstance(path, AbstractGreedyPath) and not isinstance(path, cls)):
        lacks = f" without {', '.join(missing)}" if missing else ""
        raise TypeError(
            f"path must be the greedy limit of this {type(model).__name__}, a {cls.__name__} (or an object with "
            f"{', '.join(fields)}); got a {type(path).__name__}{lacks}: {own}."
        )
    if shapes(path) != model_shapes:
        raise ValueError(
            f"path is the greedy limit of a model with {shapes(path)}, but this {type(model).__name__} has "
            f"{model_shapes}: {own}."
        )


def check_coordinate_path(model, path, cls: type, fields: Sequence[str]) -> None:
    """:func:`check_path_of` for a model of ``p`` coordinates ``β``: ``path`` is a ``cls`` (or has the ``fields``)
    whose ``beta`` has ``p`` columns."""

    def shapes(path):
        return f"p = {np.shape(path.beta)[-1]} coordinates"

    check_path_of(model, path, cls, fields, shapes, f"p = {model.p} coordinates")
