"""The full-weight attention toy: incremental rank increase, resumable output, CLI."""

import argparse
import json

import jax
import numpy as np
import pytest

from gradflow.nets._cli import add_subcommands
from gradflow.nets._toy_attention import (
    AttentionHead,
    ToyAttentionConfig,
    toy_attention_data,
    train_toy_attention,
)

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

SMALL = ToyAttentionConfig(n=100, tokens=5, dim=6, teacher_kq=(1.0, 0.5), teacher_vo=(1.0, 0.5))


def test_teacher_products_have_the_given_spectrum():
    _, _, teacher = toy_attention_data(ToyAttentionConfig(n=4, dim=10), seed=3)
    s = np.linalg.svd(np.asarray(teacher.wk @ teacher.wq.T), compute_uv=False)
    np.testing.assert_allclose(s[:4], [1.0, 0.6, 0.3, 0.0], atol=1e-5)
    s = np.linalg.svd(np.asarray(teacher.wv @ teacher.wo.T), compute_uv=False)
    np.testing.assert_allclose(s[:4], [1.0, 0.6, 0.3, 0.0], atol=1e-5)


def test_head_matches_formula():
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 3))
    w = [jax.random.normal(k, (3, 3)) for k in jax.random.split(jax.random.PRNGKey(1), 4)]
    head = AttentionHead(*w)
    xn = np.asarray(x, np.float64)
    q, k, v, o = (np.asarray(a, np.float64) for a in w)
    scores = xn @ k @ q.T @ xn.T
    p = np.exp(scores - scores.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(head(x)), p @ xn @ v @ o.T, rtol=2e-4, atol=2e-5)


def test_rank_grows_one_at_a_time_at_small_init():
    alpha, lr = 1e-5, 0.02
    r = train_toy_attention(SMALL, init_scale=alpha, steps=int(3.5 * np.log(1 / alpha) / lr), lr=lr, record_every=10)
    count = (r.sv_kq > 0.1).sum(1) + (r.sv_vo > 0.1).sum(1)
    assert count[0] == 0 and count[-1] == 4
    jumps = np.diff(count)
    assert set(jumps.tolist()) <= {0, 1}, "the rank must grow one singular value at a time"
    # every intermediate rank is a plateau lasting a visible stretch of rescaled time
    first = [r.rescaled_time[np.argmax(count >= k)] for k in range(1, 5)]
    assert np.all(np.diff(first) > 0.2), first
    # the loss drops at each stage and ends near the teacher
    assert r.loss[-1] < 1e-3 * r.loss[0]
    np.testing.assert_allclose(r.sv_vo[-1, :2], [1.0, 0.5], atol=0.02)
    np.testing.assert_allclose(r.sv_kq[-1, :2], [1.0, 0.5], atol=0.05)


def test_resume_reproduces_an_uninterrupted_run(tmp_path):
    kw = dict(init_scale=1e-2, lr=0.02, record_every=25, seed=1)
    full = train_toy_attention(SMALL, steps=200, **kw)
    train_toy_attention(SMALL, steps=100, out=tmp_path, **kw)
    resumed = train_toy_attention(SMALL, steps=200, out=tmp_path, resume=True, **kw)
    for name in ("step", "loss", "sv_kq", "sv_vo"):  # bit for bit
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(0, 201, 25))
    assert (tmp_path / "result.npz").exists()
    with pytest.raises(ValueError, match=r"cannot resume .*: lr is 0\.02 in the checkpoint, 0\.01 in this run"):
        train_toy_attention(SMALL, steps=300, out=tmp_path, resume=True, **{**kw, "lr": 0.01})


def test_resume_after_a_stop_between_records(tmp_path):
    """A run stopped between two records resumes onto the same records and weights as the uninterrupted run."""
    kw = dict(init_scale=1e-2, lr=0.02, record_every=25, seed=1)
    full = train_toy_attention(SMALL, steps=110, **kw)
    train_toy_attention(SMALL, steps=60, out=tmp_path, **kw)
    resumed = train_toy_attention(SMALL, steps=110, out=tmp_path, resume=True, **kw)
    assert resumed.step.tolist() == [0, 25, 50, 60, 75, 100, 110]
    keep = np.isin(resumed.step, full.step)
    np.testing.assert_array_equal(resumed.step[keep], full.step)
    np.testing.assert_array_equal(resumed.sv_kq[keep], full.sv_kq)
    np.testing.assert_array_equal(resumed.loss[keep], full.loss)


def test_bad_input():
    with pytest.raises(ValueError, match="init_scale"):
        train_toy_attention(SMALL, init_scale=2.0, steps=1, lr=0.1)
    with pytest.raises(ValueError, match="teacher_kq"):
        ToyAttentionConfig(dim=2, teacher_kq=(1.0, 0.5, 0.2))


def test_cli(tmp_path):
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers())
    args = parser.parse_args(
        [
            "toy-attention",
            "--init-scale",
            "0.1",
            "0.01",
            "--steps",
            "20",
            "--lr",
            "0.01",
            "--n",
            "20",
            "--tokens",
            "3",
            "--dim",
            "4",
            "--record-every",
            "10",
            "--out",
            str(tmp_path),
        ]
    )
    args.func(args)
    assert (tmp_path / "toy_attention.png").stat().st_size > 0
    assert (tmp_path / "alpha_0.01" / "metrics.jsonl").exists()
