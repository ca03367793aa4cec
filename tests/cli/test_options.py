"""The commands' options: bad command-line, sweep and model inputs, one row each: exit status 2 and one line
``gradflow: error: ...`` that names the argument, never a traceback, and nothing computed first; negative numbers as
values; a user's task as ``--model module:function``."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from pathlib import Path

import numpy as np
import pytest

from gradflow import models
from gradflow._cli import _commands, build_parser, main
from gradflow._cli._options import own_task
from gradflow._sweep import _run
from gradflow.nets import _cli as nets_cli

SWEEP = "alphas = [0.1]\nmax_stages = 1\n[[model]]\nname = 'diagonal_linear'\nn = 8\np = 2\n"


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    """A folder with a file, a folder holding another run's output, a run whose ``figures`` is a file, and sweep
    configs; and every computation replaced by an error, so that a check that comes too late fails the test."""
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "gradflow.json").write_text(json.dumps({"command": "greedy", "model": "diagonal_linear"}))
    (tmp_path / "figures_file" / "figures").parent.mkdir()
    (tmp_path / "figures_file" / "figures").write_text("")
    (tmp_path / "sweep.toml").write_text(SWEEP)
    (tmp_path / "bad.toml").write_text(SWEEP + "dim = 3\n")

    def computed(*args, **kwargs):
        raise AssertionError("computed before the input was checked")

    for name in ("simulate_flow", "greedy_limit"):
        monkeypatch.setattr(_commands, name, computed)
    demos = _commands.demos  # every family's demo
    monkeypatch.setattr(
        _commands, "demos", lambda: {n: dataclasses.replace(d, run=computed) for n, d in demos().items()}
    )
    pipeline_of = _commands.pipeline_of

    def no_run(family):  # a family's pipeline (if it has one) that computes nothing
        pipeline = pipeline_of(family)
        return pipeline and dataclasses.replace(pipeline, run=computed)

    monkeypatch.setattr(_commands, "pipeline_of", no_run)
    monkeypatch.setattr(_run, "_run", computed)
    monkeypatch.setattr(nets_cli, "_model_and_data", computed)  # vit, gpt, inrank: the model and its data
    monkeypatch.setattr(nets_cli, "train_toy_attention", computed)
    return tmp_path


@pytest.mark.parametrize(
    "argv, names",
    [
        # numbers
        ("flow --alpha 2", "argument --alpha: alpha must lie in (0, 1)"),
        ("flow --alpha abc", "argument --alpha: expected a number"),
        ("flow --alpha 0.1 --log-alpha -3", "argument --log-alpha: not allowed with argument --alpha"),
        ("flow --log-alpha 3", "argument --log-alpha: log alpha must be finite and negative"),
        ("compare --log-alpha -inf", "argument --log-alpha: log alpha must be finite and negative"),
        ("flow --model diagonal_linear --log-alpha -1e9", "log_alpha = -1e+09 is below what float64 resolves"),
        ("flow --tau-max -1e3", "argument --tau-max: expected a positive number"),
        ("flow --num-times 1", "argument --num-times: expected at least 2 recorded times"),
        ("compare --num-times 0", "argument --num-times: expected at least 2 recorded times"),
        ("flow --atol -1E-8", "argument --atol: expected a positive number"),
        ("flow --rtol -.5", "argument --rtol: expected a non-negative number"),
        ("flow --model diagonal_linear --atol 1e3", "atol must lie in [0, 0.01]"),
        ("compare --model attention_full --rtol 0.5", "rtol must lie in [0, 0.01]"),
        ("flow --alpha 1e-3 1e-3", "--alpha gives 0.001 twice: each scale is one run"),
        ("compare --log-alpha -10 -100 -10", "--log-alpha gives -10 twice"),
        ("greedy --seed -1", "argument --seed: the value must be a non-negative integer"),
        ("greedy --dim 0", "argument --dim: the value must be a positive integer"),
        ("greedy --max-stages 0", "argument --max-stages: the value must be a positive integer"),
        ("sweep {tmp}/sweep.toml --process-id -1 --num-processes 2", "argument --process-id"),
        # the task
        ("compare --model nope", "argument --model: expected a built-in task (diagonal_attention, "),
        ("greedy --model diagonal_attention --p 3", "--p does not apply to diagonal_attention"),
        ("greedy --model attention_full --singular-values 1", "--singular-values does not apply to attention_full"),
        ("flow --model diagonal_linear --teacher-kq 1", "--teacher-kq does not apply to diagonal_linear"),
        ("greedy --model matrix_factorization --singular-values 1 -2", "argument --singular-values: expected a posit"),
        ("greedy --model matrix_factorization --m 3 --n 2 --singular-values 3 2 1", "singular_values must be 1 to"),
        ("compare --model matrix_sensing --m 1 --singular-values 2 1", "singular_values must be 1 to min(m, n) = 1"),
        ("flow --model attention_full --dim 2 --teacher-vo 3 2 1", "teacher_vo must be 1 to dim = 2"),
        ("compare --model attention_full --perturb", "--perturb applies to the models with diagonal weights"),
        # the output folder, before anything is computed
        ("flow --out {tmp}/file", "argument --out: {tmp}/file is a file, not a folder"),
        ("greedy --out {tmp}/file/sub", "argument --out: {tmp}/file is a file, so no folder"),
        ("compare --out {tmp}/file", "argument --out: {tmp}/file is a file"),
        ("demo --out {tmp}/file", "argument --out: {tmp}/file is a file"),
        ("demo --full-weights --out {tmp}/figures_file", "argument --out: {tmp}/figures_file/figures is a file"),
        ("sweep --example --out {tmp}/file", "argument --out: {tmp}/file is a file"),
        ("flow --model diagonal_linear --out {tmp}/figures_file", "argument --out: {tmp}/figures_file/figures is a"),
        ("flow --model diagonal_linear --out {tmp}/other", "{tmp}/other holds the output of another run"),
        ("greedy --model diagonal_linear --out {tmp}/other", "(gradflow greedy; its settings are in"),
        ("compare --model diagonal_linear --out {tmp}/other", "pass --overwrite to replace it"),
        ("demo --out {tmp}/other", "pass --overwrite to replace it"),
        ("sweep {tmp}/sweep.toml --out {tmp}/other", "pass --overwrite (overwrite=True) to replace it"),
        ("vit --out {tmp}/file", "argument --out: {tmp}/file is a file, not a folder"),
        ("gpt --out {tmp}/figures_file", "argument --out: {tmp}/figures_file/figures is a file"),
        ("toy-attention --out {tmp}/file/sub", "argument --out: {tmp}/file is a file, so no folder"),
        ("inrank --out {tmp}/file", "argument --out: {tmp}/file is a file"),
        # InRank's sizes against the model's, before its data is read
        ("inrank --buffer 40", "need init_rank + buffer = 42 <= max_rank = 16 <= min(d_in, d_out) = 32"),
        ("inrank --config gpt2-tiny --max-rank 40", "max_rank = 40 <= min(d_in, d_out) = 32"),
        # the sweep's options and config
        ("sweep", "give a sweep config (a TOML file) or --example"),
        ("sweep {tmp}/sweep.toml --process-id 1", "give --process-id and --num-processes together"),
        ("sweep {tmp}/bad.toml", "model[0].dim: diagonal_linear has no option 'dim'"),
        ("sweep {tmp}/sweep.toml --format xlsx", "argument --format: invalid choice"),
        # the parser
        ("demo --bogus", "unrecognized arguments: --bogus"),
        ("", "the following arguments are required: COMMAND"),
    ],
)
def test_bad_command_line(tmp, capsys, argv, names):
    argv = [a.replace("{tmp}", str(tmp)) for a in argv.split()]
    if "--out" not in argv and argv and argv[0] != "demo":
        argv += ["--out", str(tmp / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gradflow: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert names.replace("{tmp}", str(tmp)) in err


@pytest.mark.parametrize(
    "command", ["demo", "flow", "greedy", "compare", "sweep --example", "vit", "gpt", "toy-attention", "inrank"]
)
def test_unwritable_out_is_refused(tmp, capsys, monkeypatch, command):
    """A folder that cannot be written, or made, is refused at once (as root, where every folder is writable, the
    folder is made to read as read-only)."""
    folder = tmp / "read_only"
    folder.mkdir(mode=0o555)
    if os.access(folder, os.W_OK):
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != folder and access(path, mode))
    for out in (folder, folder / "new"):
        assert main([*command.split(), "--out", str(out)]) == 2
        assert f"argument --out: {folder} is not writable" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, option, value",
    [
        ("flow --log-alpha -1e4 -1E+4 -.5 -3", "log_alpha", [-1e4, -1e4, -0.5, -3.0]),
        ("compare --log-alpha=-1e4 --tau-max 2", "log_alpha", [-1e4]),
        ("greedy --model matrix_factorization --singular-values 2 1e-1", "singular_values", [2.0, 0.1]),
    ],
)
def test_negative_numbers_are_values(argv, option, value):
    """Negative numbers in any notation are read as values, not as options (argparse reads ``-1e4`` as an option)."""
    assert getattr(build_parser(networks=False).parse_args(argv.split()), option) == value


def test_option_not_for_model_is_one_line_error(capsys):
    """A size option the model does not take is a one-line error listing the options it does take, each of them
    a keyword argument of the model's builder."""
    status = main(["greedy", "--model", "diagonal_attention", "--p", "3"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err
    assert err.startswith("gradflow: error: --p does not apply to diagonal_attention (it takes ")
    taken = err.split("it takes ")[1].rstrip(")").split()
    assert "--p" not in taken and set(taken) <= {
        f"--{k}" for k in inspect.signature(models.diagonal_attention).parameters
    }


def test_own_model_as_module_function(own_task_module, capsys):
    """``--model module:function``: a user's task, imported from the working folder; bad specifications are
    one-line errors (the commands on such a task: test_commands.py::test_compare_own_model)."""
    task, expected = own_task("own_task_module:make"), models.diagonal_linear(n=12, p=3, seed=1)
    np.testing.assert_array_equal(task.u0, expected.u0)
    np.testing.assert_array_equal(task.model.X, expected.model.X)
    capsys.readouterr()
    for spec, message in (
        ("own_task_module", "expected a built-in task"),
        ("no_such_module:make", "cannot import it (ModuleNotFoundError"),
        ("own_task_module:nothing", "cannot import it (AttributeError"),
        ("own_task_module:bad", "must return a gradflow.models.Task"),
    ):
        assert main(["greedy", "--model", spec, "--out", "g"]) == 2
        assert message in capsys.readouterr().err
    assert main(["greedy", "--model", "own_task_module:make", "--p", "3", "--out", "g"]) == 2
    assert "--p applies to the built-in tasks" in capsys.readouterr().err
