"""A pipeline's steps into its folder (gradflow/_demo/_steps.py): each computed once and then reused, timed and
logged; the tables, figures and report written once per configuration, results and command."""

import dataclasses
import math

import numpy as np

from gradflow._demo._steps import DemoSteps, flow_name


@dataclasses.dataclass(frozen=True)
class _Result:
    values: np.ndarray


@dataclasses.dataclass(frozen=True)
class _Config:
    size: int = 2


def test_a_step_is_computed_once_then_reused_and_logged(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return _Result(np.arange(3.0))

    first = DemoSteps(tmp_path, 1, "gradflow demo", force=False, progress=False)
    np.testing.assert_array_equal(first("one", {"k": 1}, compute).values, [0.0, 1.0, 2.0])
    again = DemoSteps(tmp_path, 1, "gradflow demo", force=False, progress=False)
    np.testing.assert_array_equal(again("one", {"k": 1}, compute).values, [0.0, 1.0, 2.0])
    assert len(calls) == 1 and again.timings["one"][1] == "reused" and first.timings["one"][1] == "computed"
    files, seconds = again.finish(lambda: [tmp_path / "made"])
    assert files == [tmp_path / "made"] and seconds >= 0
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert log[0].startswith("one\treused\tone-") and log[-1].startswith("total\t")
    assert flow_name(math.log(1e-8)) == "flow_alpha=1e-8"


def test_outputs_are_written_again_only_for_another_configuration_or_command(tmp_path):
    """The report's title names the command (``gradflow demo``, ``gradflow compare``): the same results written by
    another command are written again, with the same configuration hash."""

    def records():
        return [dict(stage=0, loss_distance=0.25)]

    drawn, hashes = [], []

    def write(command, config):
        step = DemoSteps(tmp_path, 1, command, force=False, progress=False)

        def report(figures, key):
            hashes.append(key)
            return f"# {command}\n"

        return step.write(config, records, [], json=lambda: {"n": 1}, draw=lambda: drawn.append(1), report=report)

    files = write("gradflow demo", _Config())
    assert [f.name for f in files] == ["comparison.csv", "comparison.json", "report.md"]
    assert (tmp_path / "comparison.csv").read_text().splitlines() == ["stage,loss_distance", "0,0.25"]
    write("gradflow demo", _Config())
    assert len(drawn) == 1  # the same: reused
    write("gradflow compare", _Config())
    assert len(drawn) == 2 and (tmp_path / "report.md").read_text() == "# gradflow compare\n"
    assert hashes[0] == hashes[1]
    write("gradflow compare", _Config(size=3))
    assert len(drawn) == 3 and hashes[2] != hashes[1]
