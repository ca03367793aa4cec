"""A sweep's config: its TOML file parsed into the grid, and a bad key or value named with its fix."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gradflow._sweep import ModelGrid, SweepConfig
from gradflow._sweep._grid import grid
from gradflow._sweep._io import example_config

TOML = (Path(__file__).parent / "sweep.toml").read_text()  # the sweep of tests/sweep/test_run.py
_LINEAR = (ModelGrid.from_mapping(dict(name="diagonal_linear", p=2)),)


def _config(tmp_path: Path, text: str = TOML) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def test_toml_is_parsed_into_the_grid(tmp_path):
    config = SweepConfig.from_toml(_config(tmp_path))
    assert config.seeds == (1,) and config.run == "compare" and config.max_stages == 2
    assert np.allclose(config.log_alphas, np.log([1e-2, 1e-4, 1e-8]), rtol=0, atol=1e-15)
    linear, attention = config.models
    assert dict(linear.options) == dict(n=(24,), p=(3,), nonzero=(2, 3), orthonormal=(False,), noise=(0.0,))
    assert dict(attention.options)["teacher_nonzero"] == ((1, 1),)  # one pair, not a grid of two values
    points = grid(config)
    assert len(points) == (2 + 1) * 1 * 3 and len({p.hash for p in points}) == len(points)
    assert [p.hash for p in grid(SweepConfig.from_toml(_config(tmp_path)))] == [p.hash for p in points]
    two = SweepConfig.from_toml(_config(tmp_path, TOML.replace("seeds = [1]", "seeds = 2")))  # a count: 0 and 1
    assert two.seeds == (0, 1) and len(grid(two)) == (2 + 1) * 2 * 3 and len({p.hash for p in grid(two)}) == 18
    pairs = SweepConfig.from_mapping(
        dict(alphas=[0.1], model=[dict(name="diagonal_attention", dim=2, teacher_nonzero=[[1, 1], [2, "dense"], 2])])
    )
    assert dict(pairs.models[0].options)["teacher_nonzero"] == ((1, 1), (2, None), (2, 2))  # one value: both parts


@pytest.mark.parametrize(
    "text, message",
    [
        ("sedes = 3\n[[model]]\nname = 'diagonal_linear'", "unknown key 'sedes'; did you mean 'seeds'?"),
        ("alphas = [0.1]", "no model: add a [[model]] table"),
        (
            "alphas = [0.1]\n[[model]]\nname = 'linear'",
            "model[0]: name = 'linear'; set name = one of \"diagonal_linear\"",
        ),
        (
            "alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\ndim = 3",
            "model[0].dim: diagonal_linear has no option 'dim'; allowed: n, p, nonzero, orthonormal, noise.",
        ),
        (
            "alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\np = 'four'",
            "model[0].p: expected a positive integer, or a list of them; got 'four'.",
        ),
        (
            "alphas = [0.1]\n[[model]]\nname = 'diagonal_attention'\nteacher_nonzero = [1, 2, 3]",
            "model[0].teacher_nonzero: expected a pair [KQ, VO]",
        ),
        (
            "alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\np = 3\nnonzero = [2, 5]",
            "model[0] (diagonal_linear, p=3, nonzero=5): nonzero: the teacher's number of nonzero entries must lie in [0, 3]",
        ),
        ("alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\nseed = 1", "use the top-level key seeds"),
        ("alphas = [2.0]\n[[model]]\nname = 'diagonal_linear'", "alphas = [2.0]; expected a list of numbers in (0, 1)"),
        ("alphas = [0.1]\nlog_alphas = [-3]\n[[model]]\nname = 'diagonal_linear'", "give alphas or log_alphas"),
        ("[[model]]\nname = 'diagonal_linear'", 'run = "compare" needs the scales: add alphas'),
        ("log_alphas = [-1e9]\n[[model]]\nname = 'diagonal_linear'", "log_alphas = -1e+09 is below what float64"),
        ("run = 'flow'\nalphas = [0.1]\n[[model]]\nname = 'diagonal_linear'", 'run = "flow" needs tau_max'),
        ("run = 'both'\n[[model]]\nname = 'diagonal_linear'", 'set run = "greedy", "flow" or "compare"'),
        ("seeds = [1, 1]\nalphas = [0.1]\n[[model]]\nname = 'diagonal_linear'", "repeats a seed"),
        (
            "alphas = [0.1]\n[[model]]\nname = 'diagonal_linear'\np = 3\n[[model]]\nname = 'diagonal_linear'\np = 3",
            "the model diagonal_linear with n=100, p=3,",
        ),
        (
            "num_times = 1\nalphas = [0.1]\n[[model]]\nname = 'diagonal_linear'",
            "num_times = 1; expected an integer >= 2",
        ),
        (
            "threshold = 1.5\nalphas = [0.1]\n[[model]]\nname = 'diagonal_linear'",
            "threshold = 1.5; expected a fraction",
        ),
        ("alphas = [0.1\n", "not valid TOML"),
    ],
)
def test_bad_toml_names_the_key_and_the_fix(tmp_path, text, message):
    path = _config(tmp_path, text)
    with pytest.raises(ValueError) as err:
        SweepConfig.from_toml(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


@pytest.mark.parametrize(
    "build, names",
    [
        (lambda: SweepConfig(models=_LINEAR, log_alphas=(-1.0, math.nan)), "log_alphas must be finite and negative"),
        (lambda: SweepConfig(models=_LINEAR, log_alphas=(-1.0, -1.0)), "alphas (or log_alphas) repeats a value"),
    ],
)
def test_bad_arguments_from_python(build, names):
    with pytest.raises(ValueError) as err:
        build()
    assert names in str(err.value)


def test_example_config_is_valid():
    config = SweepConfig.from_toml(example_config())
    assert config.run == "compare" and len(grid(config)) == 3 * 8 * 3
