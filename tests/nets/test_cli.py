"""The networks' commands: gpt end to end, --remat and --attention, --init-scale checked alike, inrank's defaults and resume."""

import argparse
import json

import pytest

from gradflow._cli import main
from gradflow.nets._cli import add_subcommands

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


def _cli(argv):
    parser = argparse.ArgumentParser(prog="gradflow")
    add_subcommands(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    args.func(args)


def test_cli_gpt(tmp_path):
    _cli(f"gpt --init-scale 1 0.1 --steps 3 --batch-size 16 --micro-batch 8 --out {tmp_path} --no-progress".split())
    for name in (
        "report.md",
        "figures/stable_rank_by_layer.png",
        "figures/singular_value_evolution.png",
        "figures/losses.png",
        "scale_1/metrics.jsonl",
        "scale_0.1/figures/normalised_spectra.png",
        "scale_0.1/figures/stable_rank_training.png",
        "scale_0.1/checkpoint/state.eqx",
    ):
        assert (tmp_path / name).exists(), name
    assert "| 0.1 | 3 |" in (tmp_path / "report.md").read_text()
    with pytest.raises(ValueError, match="unknown GPT config 'gpt3'"):
        _cli(["gpt", "--config", "gpt3", "--out", str(tmp_path / "x")])


@pytest.mark.parametrize(
    "argv, remat, attention",
    [
        (["gpt", "--config", "gpt2-small", "--no-remat", "--attention", "xla"], False, "xla"),
        (["vit", "--config", "tiny", "--remat"], True, "auto"),
    ],
)
def test_cli_remat_and_attention_options_override_the_config(argv, remat, attention):
    from gradflow.nets._cli import _model_and_data

    parser = argparse.ArgumentParser(prog="gradflow")
    add_subcommands(parser.add_subparsers(required=True))
    model_cfg, _, _ = _model_and_data(parser.parse_args(argv))
    assert model_cfg.remat is remat and model_cfg.attention == attention


@pytest.mark.parametrize("command", ["vit", "gpt", "toy-attention"])
@pytest.mark.parametrize("scale", ["0", "-1", "nan", "inf"])
def test_init_scale_is_checked_alike_by_every_command(capfd, command, scale):
    """Issue 20: vit and gpt accepted --init-scale 0 or -1; toy-attention rejected them."""
    assert main([command, f"--init-scale={scale}"]) == 2
    assert "argument --init-scale: init_scale must" in capfd.readouterr().err


@pytest.mark.slow
def test_cli_inrank_resume_and_rank_figure(tmp_path):
    """``gradflow inrank`` checkpoints, draws the rank figure of each InRank mode, and with --resume reloads the
    finished runs instead of retraining them."""
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers())
    size = "--steps 6 --batch-size 8 --buffer 4 --check-every 2 --efficient-after 4"
    argv = f"inrank --modes full inrank-efficient {size} --remat --out {tmp_path}".split()
    args = parser.parse_args(argv)
    args.func(args)
    assert (tmp_path / "figures" / "ranks_inrank-efficient.png").exists()
    assert not (tmp_path / "figures" / "ranks_full.png").exists()
    for mode, phase in (("full", "full"), ("inrank-efficient", "fixed-rank")):
        meta = json.loads((tmp_path / mode / "checkpoint" / "meta.json").read_text())
        assert (meta["step"], meta["phase"]) == (6, phase)
    first = json.loads((tmp_path / "comparison.json").read_text())
    args = parser.parse_args(argv + ["--resume"])
    args.func(args)
    again = json.loads((tmp_path / "comparison.json").read_text())
    timing = ("seconds_per_step", "seconds_per_rank_check", "n_traces", "peak_memory_bytes")
    for mode in first:
        assert again[mode]["seconds_per_step"] == first[mode]["seconds_per_step"]  # from the checkpoint: no step run
        assert {k: v for k, v in again[mode].items() if k not in timing} == {
            k: v for k, v in first[mode].items() if k not in timing
        }


def test_cli_inrank_defaults_fit_the_default_gpt():
    """A bare ``gradflow inrank`` runs: its buffer fits gpt2-tiny's MLP matrices (32 × 128: R = 16 columns beside
    r₀ = 2, so b = 14, not the paper's 100, which a larger GPT keeps); ``--no-progress`` as the other commands."""
    from gradflow.nets._cli import _inrank_config

    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers())
    args = parser.parse_args(["inrank", "--no-progress"])
    tiny = _inrank_config(args)
    assert args.no_progress and (tiny.init_rank, tiny.buffer, tiny.allocation(32, 128)) == (2, 14, 16)
    assert _inrank_config(parser.parse_args(["inrank", "--config", "gpt2-small"])).buffer == 100
    assert _inrank_config(parser.parse_args(["inrank", "--buffer", "5"])).buffer == 5
