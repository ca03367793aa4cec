"""The interface every model family implements (docs/extending.md).

A family is a kind of model — diagonal weights ``h(x; u ⊙ v)``, factorised weights ``W_j = U_j V_jᵀ`` — with its
exact flow, gradient descent, greedy limit and comparison. The public entry points (``simulate_flow``,
``simulate_gd``, ``greedy_limit``, ``compare_limits``) do the checks that every family shares, then look the family
up from the model's type (``gradflow._registry``) and call it with checked arguments; the command line and the demo
ask the same family for its tables and figures. A family imports the solver kit and the shared modules below it,
never the entry points, the registry or another family.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ._checks import check_resolved
from ._greedy import AbstractGreedyPath


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
    """A model family: the model type it serves and what the entry points and the command line need of it.

    Arguments named as in the public entry points have been checked there: ``ts`` (rescaled times), ``log_a``
    (``log α``, a float64 array, 1-D when ``batched``), ``max_steps`` (None or a positive int), ``rtol``/``atol``,
    ``lr``, ``steps``/``record_every``, ``tolerances`` and ``max_stages``. The initialisation (``u0, v0``) is the
    family's to check.
    """

    name: ClassVar[str]
    model_type: ClassVar[type]
    flow_options: ClassVar[tuple[str, ...]]
    """The keyword options of ``simulate_flow`` that apply to this family only (e.g. ``jacobian_rank``)."""

    @abc.abstractmethod
    def check_init(self, model, u0, v0) -> tuple[Any, Any]:
        """The initialisation ``(u0, v0)``, checked (an error for a bad shape or a degenerate one, an
        ``AssumptionWarning`` for a near-degenerate one)."""

    @abc.abstractmethod
    def flow(self, model, request: FlowRequest, **options):
        """The exact flow of ``request`` (a result with ``result`` and ``message`` per run; ``throw`` is the
        caller's), with a progress bar if ``request.progress``; Ctrl-C ends it with the runs it stopped
        ``interrupted`` (see ``gradflow._solver.run_segments``). ``options``: the family's ``flow_options``."""

    def check_resolved(self, log_a, ts, *, rtol: float, atol: float, names=("alpha", "log_alpha")) -> None:
        """Refuse (a ``ValueError`` that states the supported range) the scales ``log_a`` and output times ``ts`` (or
        None) that float64 cannot resolve with this family's flow at the tolerances, before any run. By default
        ``gradflow._checks.check_resolved`` with the state reaching ``2 |log α|`` (``log w`` of diagonal weights);
        a family whose state or integrator has another range overrides it."""
        check_resolved(log_a, ts, rtol=rtol, atol=atol, names=names)

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
