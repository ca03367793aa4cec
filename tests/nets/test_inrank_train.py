"""InRank's training runs (paper 004): a tiny comparison end to end, exact resume across the switch to fixed rank,
and the comparison's table."""

import json
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from nets_common import TINY_GPT, params_equal, text, tiny_recipe, without_timing

from gradflow.nets._gpt import GPT
from gradflow.nets._inrank import InRankConfig, mlp_ranks
from gradflow.nets._inrank_train import compare_inrank, comparison_table

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path):
    recipe = tiny_recipe(24, batch_size=8, eval_every=24, log_every=4, eval_batch_size=64)
    inrank = InRankConfig(init_rank=2, buffer=3, check_every=4, efficient_after=12)
    rows = compare_inrank(
        lambda: GPT(TINY_GPT, key=jax.random.PRNGKey(0)),
        recipe,
        text(),
        modes=("full", "inrank-efficient"),
        inrank=inrank,
        out=tmp_path,
    )
    full, eff = rows["full"], rows["inrank-efficient"]
    assert full["mean_mlp_rank"] == 16 and eff["mean_mlp_rank"] < 16
    assert eff["trainable_parameters"] < full["trainable_parameters"]
    assert eff["n_traces"] == 2 and full["n_traces"] == 1  # rank growth never recompiles the step
    assert np.isfinite(eff["eval_perplexity"]) and eff["eval_perplexity"] < 257
    ranks = [json.loads(line) for line in (tmp_path / "inrank-efficient" / "ranks.jsonl").read_text().splitlines()]
    assert [r["step"] for r in ranks] == [4, 8, 12, 12]
    assert ranks[-1]["phase"] == "fixed-rank" and ranks[-1]["fc_in"]["rank"] == ranks[-2]["fc_in"]["rank"]
    metrics = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if "loss" in m]
    assert losses[-1] < losses[0]
    table = (tmp_path / "comparison.md").read_text()
    assert "not comparable" in table and "inrank-efficient" in table


@pytest.mark.slow  # fast twins: tests/nets/test_train.py (resume), test_inrank.py::test_reparametrisation_to_fixed_rank
def test_resume_reproduces_uninterrupted_run(tmp_path, monkeypatch):
    """A run killed in the InRank phase, resumed, stopped after the switch to fixed rank and resumed again ends
    exactly as the uninterrupted run: parameters, ranks, metrics and logs."""
    from gradflow.nets import _inrank, _inrank_train, read_metrics

    adamw = dict(optimizer="adamw", weight_decay=0.1)
    recipe = tiny_recipe(16, batch_size=8, eval_batch_size=64, log_every=2, eval_every=4, checkpoint_every=4, **adamw)
    inrank = InRankConfig(init_rank=2, buffer=3, check_every=2, efficient_after=8)

    def run(folder, **kw):
        return _inrank_train.train_inrank(
            GPT(TINY_GPT, key=jax.random.PRNGKey(0)), recipe, text(), inrank=inrank, seed=1, out=tmp_path / folder, **kw
        )

    full = run("full")
    # kill during the rank check of step 8: the checkpoint is at step 4, the logs reach step 6
    checks, update_ranks = [], _inrank.update_ranks

    def killed_at_step_8(*args, **kw):
        checks.append(None)
        if len(checks) == 4:
            raise KeyboardInterrupt
        return update_ranks(*args, **kw)

    monkeypatch.setattr(_inrank, "update_ranks", killed_at_step_8)
    with pytest.raises(KeyboardInterrupt):
        run("split")
    monkeypatch.undo()
    assert json.loads((tmp_path / "split" / "checkpoint" / "meta.json").read_text())["step"] == 4
    assert read_metrics(tmp_path / "split" / "metrics.jsonl")[-1]["step"] == 6
    # resumed in the InRank phase, stopped in the fixed-rank phase (step 11, mid log window)
    part = run("split", resume=True, stop_after=11)
    meta = json.loads((tmp_path / "split" / "checkpoint" / "meta.json").read_text())
    assert (part.steps, meta["step"], meta["phase"]) == (11, 11, "fixed-rank") and meta["log_window"]
    assert meta["ranks"] == mlp_ranks(part.model) and part.evaluation["step"] == 8
    resumed = run("split", resume=True)
    assert params_equal(full.model, resumed.model)
    assert mlp_ranks(resumed.model) == mlp_ranks(full.model)
    assert resumed.ranks == full.ranks and resumed.steps == 16
    assert without_timing(resumed.metrics) == without_timing(full.metrics)
    for name in ("metrics.jsonl", "ranks.jsonl"):
        split, whole = (without_timing(read_metrics(tmp_path / f / name)) for f in ("split", "full"))
        assert split == whole
    assert [r["phase"] for r in resumed.ranks] == ["inrank"] * 4 + ["fixed-rank"]
    # a finished run resumes to itself; a different run refuses the checkpoint
    again = run("split", resume=True)
    assert params_equal(again.model, full.model) and again.n_traces == 0
    assert without_timing(again.metrics) == without_timing(full.metrics)
    with pytest.raises(
        ValueError, match="cannot resume .*: mode is 'inrank-efficient' in the checkpoint, 'inrank' in this run"
    ):
        run("split", resume=True, mode="inrank")
    with pytest.raises(ValueError, match="needs the run folder"):
        _inrank_train.train_inrank(GPT(TINY_GPT, key=jax.random.PRNGKey(0)), recipe, text(), resume=True)


def _row(ppl, rank, trainable, peak, check):
    return dict(
        eval_perplexity=ppl,
        mean_mlp_rank=rank,
        trainable_parameters=trainable,
        seconds_per_step=0.0123456,
        seconds_per_rank_check=check,
        state_bytes=3 * 2**20,
        peak_memory_bytes=peak,
    )


def test_comparison_table_has_a_row_per_mode_and_the_tokenizer_caveat():
    rows = {"full": _row(12.345678, 16, 1234567, 5 * 2**20, None), "inrank": _row(None, 4.25, 1000, None, 0.5)}
    byte = comparison_table(rows, SimpleNamespace(name="wikitext", tokenizer_name="byte")).splitlines()
    assert byte[0].startswith("InRank comparison on wikitext (device: ") and len(byte) == 8
    assert byte[4] == "| full | 12.35 | 16.0 | 1,234,567 | 0.0123 | n/a | 3.0 | 5 |"
    assert byte[5] == "| inrank | n/a | 4.2 | 1,000 | 0.0123 | 0.5000 | 3.0 | n/a |"
    assert "per `byte` token: not comparable with the InRank paper's" in byte[7]
    assert len(comparison_table(rows, SimpleNamespace(name="w", tokenizer_name="gpt2")).splitlines()) == 6
