"""What the demos share: a demo's steps into an output folder, each computed or reused and timed, and the
comparison of its runs with the greedy limit."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .._api import compare_limits, greedy_limit
from .._config import check_interrupt
from .._io import ResultStore, config_hash, write_csv, write_json
from .._kit._comparison import default_delta
from .._kit._report import format_alpha


@dataclasses.dataclass(frozen=True)
class PipelineResult:
    """What a pipeline produced: its configuration and task, the greedy ``path``, the ``flows`` and their
    ``comparison``, the written ``files``, the step ``log`` (``(step, how it was obtained, file)``) and the
    ``seconds`` it took."""

    config: Any
    task: Any
    path: Any
    flows: list
    comparison: Any
    files: list[Path]
    log: list[tuple[str, str, Path]]
    seconds: float


def flow_name(log_alpha: float) -> str:
    """The name of the flow at ``log α`` among a demo's results."""
    return f"flow_alpha={format_alpha(log_alpha)}"


class DemoSteps:
    """A demo's steps into the folder ``out``: each computed or reused through ``store`` (``out/results``), timed
    into ``timings`` (seconds and how it was obtained) and counted on a progress bar that ``command`` (the command
    line that runs them, ``"gradflow demo"``) names. Safe to call from several threads."""

    def __init__(self, out: Path, total: int, command: str, *, force: bool, progress: bool):
        self.start = time.perf_counter()
        self.out = out
        self.command = command
        self.store = ResultStore(out / "results", force=force)
        self.bar = tqdm(total=total, desc=command, unit="step", disable=not progress, leave=True)
        self.timings: dict[str, tuple[float, str]] = {}

    def __call__(self, name: str, key, compute):
        check_interrupt()  # Ctrl-C during the step before (deferred, gradflow._config): the finished ones are kept
        self.bar.set_postfix_str(name, refresh=True)
        t0 = time.perf_counter()
        result = self.store.get(name, key, compute)
        how = next(how for n, how, _ in reversed(self.store.log) if n == name)
        self.timings[name] = (time.perf_counter() - t0, how)
        self.bar.update()
        return result

    def greedy(self, config, task, base: dict[str, Any]) -> tuple[Any, float]:
        """The greedy limit of ``task`` as ``config`` asks (a failure goes into the report) and the comparison's
        window margin δ."""
        options = dict(max_stages=config.max_stages, check_assumptions=config.check_assumptions)
        model, u0, v0 = task.model, task.u0, task.v0
        key = dict(base, **options)
        kept = self.store.path("greedy", key, suffix=".stages.npz")  # Ctrl-C keeps the finished stages for a re-run
        if self.store.force:
            kept.unlink(missing_ok=True)
        path = self("greedy", key, lambda: greedy_limit(model, u0=u0, v0=v0, throw=False, checkpoint=kept, **options))
        kept.unlink(missing_ok=True)  # the path is stored: its stages are not needed any more
        return path, default_delta(path.times) if config.delta is None else config.delta

    def write(self, config, records, figures: list[Path], *, json, draw, report) -> list[Path]:
        """Write the tables (``comparison.csv``: ``records()``, a comparison's or several's rows; ``.json``:
        ``json()``), the ``figures`` (``draw()``) and ``report.md`` (``report(figures relative to out,
        configuration hash)``) into ``out``, unless they were made from the same configuration and results by the
        same command; returns the files."""
        out = self.out
        targets = [out / "comparison.csv", out / "comparison.json", out / "report.md", *figures]
        key = dict(config=dataclasses.asdict(config), results=sorted(p.name for _, _, p in self.store.log))
        made = dict(key, command=self.command)  # the report's title names the command
        if self.store.fresh("outputs", made, targets):
            return targets
        write_csv(out / "comparison.csv", records())
        write_json(out / "comparison.json", json())
        draw()
        (out / "report.md").write_text(report([f.relative_to(out) for f in figures], config_hash(key)))
        self.store.mark("outputs", made, targets)
        return targets

    def finish(self, write: Callable[[], list[Path]]) -> tuple[list[Path], float]:
        """The last step, ``write`` (tables, figures, report), then the step log into ``out/log.txt``; returns the
        written files and the seconds since the start."""
        self.bar.total = self.bar.n + 1  # fewer steps than counted when an experiment had nothing to perturb
        self.bar.set_postfix_str("tables, figures, report", refresh=True)
        files = write()
        self.bar.update()
        self.bar.close()
        seconds = time.perf_counter() - self.start
        (self.out / "log.txt").write_text(
            "".join(f"{name}\t{what}\t{p.name}\n" for name, what, p in self.store.log) + f"total\t{seconds:.1f} s\n"
        )
        return files, seconds


def compare_runs(config, task, path, runs, log_alphas, *, delta: float, ts):
    """[`compare_limits`][gradflow.compare_limits] of a demo's ``runs`` of ``task`` (one per ``log_alphas``,
    recorded at ``ts``) with its greedy ``path``."""
    return compare_limits(
        task.model,
        log_alpha=np.array(log_alphas),
        u0=task.u0,
        v0=task.v0,
        path=path,
        delta=delta,
        ts=ts,
        threshold=config.threshold,
        flows=runs,
    )
