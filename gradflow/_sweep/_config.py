"""What a sweep computes: a grid over built-in models, their sizes and teachers, seeds and α (from TOML).

A :class:`SweepConfig` is a small immutable description, validated on construction. The TOML form
(read by :meth:`SweepConfig.from_toml`; the docs' *Scaling out* page has the full schema)::

    run = "compare"            # "greedy", "flow" or "compare" (greedy + flow + their comparison)
    seeds = 8                  # seeds 0..7, or a list [0, 3, 5]
    alphas = [1e-2, 1e-8]      # or log_alphas = [-10.0, -1000.0]
    max_stages = 3

    [[model]]
    name = "diagonal_linear"
    n = 64
    p = [4, 8]                 # a list is an axis of the grid
    nonzero = [2, "dense"]

Every option of a ``[[model]]`` table is a value or a list of values; the grid is the product of
all lists, times the seeds, times the α's. A bad key or value raises ``ValueError`` naming the key
(``model[1].dim``) and how to fix it.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import inspect
import itertools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._config import BATCHING
from .._kit._checks import check_scales
from .._registry import TASKS, builtin, family_named

RUNS = ("greedy", "flow", "compare")
SWEEPABLE = tuple(name for name, task in TASKS.items() if task.sweep)
"""The built-in tasks a sweep takes (those whose family lists the options a sweep may vary), of every family."""


def _defaults(model: str) -> dict[str, Any]:
    """The builder's default value of every sweepable option."""
    params = inspect.signature(builtin(model).build).parameters
    return {name: params[name].default for name in builtin(model).sweep}


def _hint(key: str, allowed) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}."


@dataclasses.dataclass(frozen=True)
class ModelGrid:
    """One built-in model and the values of each of its options (every option listed, defaults filled in).

    Attributes:
        name: a built-in task of any family (``gradflow.models.TASKS``), e.g. ``diagonal_linear`` or
            ``matrix_sensing``.
        options: ``(option, values)`` pairs in the builder's order; the grid is their product.
    """

    name: str
    options: tuple[tuple[str, tuple[Any, ...]], ...]

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], where: str = "model") -> ModelGrid:
        """A grid from a ``[[model]]`` table: ``name`` and options, each a value or a list of values."""
        if not isinstance(table, Mapping):
            raise ValueError(f"{where}: expected a table (write [[model]] followed by name = ...).")
        name = table.get("name")
        if name not in SWEEPABLE:
            got = "no name" if name is None else f"name = {name!r}"
            choices = ", ".join(f'"{m}"' for m in SWEEPABLE)
            raise ValueError(f"{where}: {got}; set name = one of {choices}.")
        kinds = builtin(name).sweep
        values = _defaults(name)
        given = {}
        for key, raw in table.items():
            if key == "name":
                continue
            if key == "seed":
                raise ValueError(f"{where}.seed: the seeds are set for the whole sweep; use the top-level key seeds.")
            if key not in kinds:
                raise ValueError(f"{where}.{key}: {name} has no option {key!r}; {_hint(key, kinds)}")
            kind = kinds[key]
            items = [raw] if kind.is_single(raw) else raw
            if not items:
                raise ValueError(f"{where}.{key}: an empty list; give at least one value.")
            try:
                given[key] = tuple(dict.fromkeys(kind.check(v) for v in items))
            except ValueError:
                raise ValueError(f"{where}.{key}: expected {kind.expected}, or a list of them; got {raw!r}.") from None
        options = tuple((key, given.get(key, (values[key],))) for key in kinds)
        grid = cls(name, options)
        for setting in grid.settings():  # the builders' own checks (e.g. nonzero <= p), once per setting
            try:
                builtin(name).build(**dict(setting), seed=0)
            except ValueError as err:
                shown = ", ".join(f"{k}={v!r}" for k, v in setting if k in given)
                raise ValueError(f"{where} ({name}, {shown}): {err}") from None
        return grid

    def settings(self) -> list[tuple[tuple[str, Any], ...]]:
        """Every combination of the option values, as ``(option, value)`` tuples (grid order)."""
        names = [k for k, _ in self.options]
        return [tuple(zip(names, combo)) for combo in itertools.product(*(v for _, v in self.options))]


_TOP = (
    "run",
    "seeds",
    "alphas",
    "log_alphas",
    "max_stages",
    "check_assumptions",
    "num_times",
    "tau_max",
    "atol",
    "rtol",
    "max_steps",
    "threshold",
    "delta",
    "batching",
    "batch_size",
    "model",
)


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A sweep: the grid (models × settings × seeds × α) and how each point is computed.

    Attributes:
        models: the model grids (the TOML's ``[[model]]`` tables).
        run: ``"greedy"`` ([`greedy_limit`][gradflow.greedy_limit] per task), ``"flow"``
            ([`simulate_flow`][gradflow.simulate_flow] per point up to ``tau_max``) or ``"compare"`` (both, and
            each flow compared with its greedy path as in [`compare_limits`][gradflow.compare_limits]).
        seeds: the seeds of every model setting (data, teacher and initialisation).
        log_alphas: the scales ``log α`` of the flows (unused for ``run = "greedy"``).
        alphas: the scales ``α`` as given (the TOML's ``alphas``; empty where they were given as ``log_alphas``): the
            table's ``alpha`` column holds them exactly (``exp(log 0.01)`` is ``0.010000000000000004``).
        max_stages: cap on the greedy stages (None: until ``T = ∞``).
        check_assumptions: run the greedy path's Hessian (4.3) and perturbed phase-(B) (4.4) checks.
        num_times: recorded times per flow (``compare`` adds the window edges and stage times).
        tau_max: the flows' last rescaled time (``compare``: default 1.25 × the last greedy stage time).
        atol, rtol, max_steps: ``simulate_flow``'s tolerances and step limit (None, the default: no limit).
        threshold, delta: ``compare_limits``' stage-detection fraction and window margin.
        batching: ``"separate"`` (each flow alone, as many at once as there are cores), ``"vmap"`` (the flows of
            one shape solved together, ``batch_size`` per device) or ``"auto"`` (``"vmap"`` on a GPU or TPU,
            ``"separate"`` on the CPU); see [`simulate_flow`][gradflow.simulate_flow]'s ``batching``.
        batch_size: with ``batching = "vmap"``, flows per device in one solver call.
    """

    models: tuple[ModelGrid, ...]
    run: str = "compare"
    seeds: tuple[int, ...] = (0,)
    log_alphas: tuple[float, ...] = ()
    alphas: tuple[float, ...] = ()
    max_stages: int | None = None
    check_assumptions: bool = True
    num_times: int = 400
    tau_max: float | None = None
    atol: float = 1e-8
    rtol: float = 0.0
    max_steps: int | None = None
    threshold: float = 0.5
    delta: float | None = None
    batching: str = "auto"
    batch_size: int = 32

    def __post_init__(self):
        if not self.models or not all(isinstance(m, ModelGrid) for m in self.models):
            raise ValueError('no model: add a [[model]] table with name = "diagonal_linear" (or another model).')
        if self.run not in RUNS:
            raise ValueError(f'run = {self.run!r}; set run = "greedy", "flow" or "compare".')
        if not self.seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in self.seeds):
            raise ValueError(f"seeds = {list(self.seeds)!r}; give a count (seeds = 8) or a list of integers >= 0.")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds = {list(self.seeds)!r} repeats a seed; list each seed once.")
        tasks = [(m.name, setting) for m in self.models for setting in m.settings()]
        for (name, setting), count in collections.Counter(tasks).items():
            if count > 1:
                raise ValueError(
                    f"the model {name} with {', '.join(f'{k}={v!r}' for k, v in setting) or 'its defaults'} is listed "
                    f"{count} times (in [[model]] tables or an option's values): its rows would be written {count} "
                    "times; list each setting once."
                )
        if self.run != "greedy":
            if not self.log_alphas:
                raise ValueError(f'run = "{self.run}" needs the scales: add alphas = [1e-2, 1e-8] (or log_alphas).')
            check_scales(None, list(self.log_alphas), names=("alphas", "log_alphas"))  # simulate_flow's own check
            if len(set(self.log_alphas)) != len(self.log_alphas):
                raise ValueError("alphas (or log_alphas) repeats a value; list each scale once.")
        if self.run == "flow" and self.tau_max is None:
            raise ValueError('run = "flow" needs tau_max (the last rescaled time); add tau_max = 5.0, say.')
        self._check_int("max_stages", 1, optional=True)
        self._check_int("num_times", 2)
        self._check_int("max_steps", 1, optional=True)
        self._check_int("batch_size", 1)
        if self.batching not in BATCHING:
            raise ValueError(f"batching = {self.batching!r}; set one of {', '.join(map(repr, BATCHING))}.")
        self._check_number("threshold")
        if not isinstance(self.check_assumptions, bool):
            raise ValueError(f"check_assumptions = {self.check_assumptions!r}; set true or false.")
        self._check_number("tau_max", positive=True, optional=True)
        self._check_number("atol", positive=True)
        self._check_number("rtol")
        self._check_number("delta", optional=True)
        if self.run != "greedy":  # scales and times float64 resolves, as simulate_flow checks them, for each family
            tau = None if self.tau_max is None else [self.tau_max]
            for family in dict.fromkeys(family_named(builtin(m.name).family) for m in self.models):
                names = ("alphas", "log_alphas")
                family.check_resolved(self.log_alphas, tau, rtol=self.rtol, atol=self.atol, names=names)
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold = {self.threshold!r}; expected a fraction strictly between 0 and 1.")

    def _check_number(self, name: str, *, positive: bool = False, optional: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not (number and (value > 0 if positive else value >= 0)):
            raise ValueError(f"{name} = {value!r}; expected a {'positive' if positive else 'non-negative'} number.")

    def _check_int(self, name: str, low: int, *, optional: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            extra = " (leave it out for no limit)" if optional else ""
            raise ValueError(f"{name} = {value!r}; expected an integer >= {low}{extra}.")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SweepConfig:
        """A config from parsed TOML (see the module docstring)."""
        for key in data:
            if key not in _TOP:
                raise ValueError(f"unknown key {key!r}; {_hint(key, _TOP)}")
        tables = data.get("model", [])
        if isinstance(tables, Mapping):
            tables = [tables]
        if not isinstance(tables, list) or not tables:
            raise ValueError('no model: add a [[model]] table with name = "diagonal_linear" (or another model).')
        fields: dict[str, Any] = {k: v for k, v in data.items() if k not in ("model", "alphas", "seeds")}
        fields["models"] = tuple(ModelGrid.from_mapping(t, f"model[{i}]") for i, t in enumerate(tables))
        if "seeds" in data:
            fields["seeds"] = _seeds(data["seeds"])
        if "alphas" in data and "log_alphas" in data:
            raise ValueError("give alphas or log_alphas, not both.")
        if "alphas" in data:
            fields["alphas"] = tuple(float(a) for a in _numbers(data["alphas"], "alphas", 0.0, 1.0))
            fields["log_alphas"] = tuple(math.log(a) for a in fields["alphas"])
        elif "log_alphas" in data:
            fields["log_alphas"] = tuple(_numbers(data["log_alphas"], "log_alphas", -math.inf, 0.0))
        for name in ("tau_max", "atol", "rtol", "threshold", "delta"):
            if isinstance(fields.get(name), int) and not isinstance(fields[name], bool):
                fields[name] = float(fields[name])
        return cls(**fields)

    @classmethod
    def from_toml(cls, source: str | os.PathLike) -> SweepConfig:
        """Read a TOML file (errors name the file and the key)."""
        from ._io import read_toml

        path = Path(source)
        try:
            return cls.from_mapping(read_toml(path))
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None


def _seeds(value) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"seeds = {value!r}; a count of seeds must be >= 1.")
        return tuple(range(value))
    if isinstance(value, list):
        return tuple(value)
    raise ValueError(f"seeds = {value!r}; give a count (seeds = 8) or a list of integers >= 0.")


def _numbers(value, name: str, low: float, high: float) -> list[float]:
    items = value if isinstance(value, list) else [value]
    ok = items and all(isinstance(v, (int, float)) and not isinstance(v, bool) and low < v < high for v in items)
    if not ok:
        where = "in (0, 1)" if name == "alphas" else "finite and < 0"
        raise ValueError(f"{name} = {value!r}; expected a list of numbers {where}.")
    return [float(v) for v in items]
