"""Training on several devices and processes: 4-device data parallelism (replicated and FSDP) gives the 1-device
losses, checkpoints move between device counts, InRank's rule runs on sharded factors, and ``gradflow gpt`` as two
``jax.distributed`` processes on localhost gives the 1-device losses too.

JAX fixes its device count when it starts, so the runs happen in subprocesses with
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (the pytest process keeps its single CPU device): this file
run as a script, which writes what it measured to a JSON file that the tests read, or the command line.
"""

import dataclasses
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from gradflow.nets import read_metrics

pytestmark = pytest.mark.usefixtures("unoptimised_xla")  # conftest.py: compile fast

# float32 on the CPU: the sums over a batch split in 4 differ from the 1-device sums by rounding only
# (measured: at most 1.0e-7 relative in the losses, 7e-7 in the parameters after 8 AdamW steps, 2e-9 in InRank's
# explained ratios)
RTOL = 1e-6


def _subprocess(args, devices: int):
    """``python <this file> args`` (or ``python -m gradflow args[1:]`` if ``args[0] == "-m"``) on ``devices`` CPUs."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"], env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "cpu", "1"  # as conftest.unoptimised_xla
    command = ["-m", "gradflow", *args[1:]] if args[0] == "-m" else [__file__, *args]
    return subprocess.Popen(
        [sys.executable, *map(str, command)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _finish(proc, timeout: float = 600) -> None:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out.decode()[-4000:]


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    """The runs of :func:`_single_process` on 4 CPU devices."""
    folder = tmp_path_factory.mktemp("devices")
    _finish(_subprocess(["single", folder], devices=4))
    return json.loads((folder / "result.json").read_text())


def _close(a, b, rtol=RTOL):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=0)


def test_data_parallel_gives_the_one_device_losses(four_devices):
    r = four_devices
    assert r["devices"] == 4 and len(r["one"]["losses"]) == 8
    _close(r["ddp"]["losses"], r["one"]["losses"])
    _close(r["ddp"]["eval_loss"], r["one"]["eval_loss"])
    assert r["ddp"]["max_param_diff"] < 1e-5  # relative to the largest parameter
    assert r["ddp"]["sharded"] == []  # replicated: every array whole on every device


def test_fsdp_shards_the_large_arrays_and_gives_the_one_device_losses(four_devices):
    r = four_devices
    _close(r["fsdp"]["losses"], r["one"]["losses"])
    _close(r["fsdp"]["eval_loss"], r["one"]["eval_loss"])
    assert r["fsdp"]["max_param_diff"] < 1e-5
    sharded = dict(r["fsdp"]["sharded"])
    assert sharded == {  # arrays of >= FSDP_MIN_SIZE entries, along their longest axis (not the layer axis)
        "params.wte": "P(None, 'data')",  # (256, 32)
        "params.blocks.mlp.fc_in.weight": "P(None, None, 'data')",  # (2 layers, 32, 128)
        "params.blocks.mlp.fc_out.weight": "P(None, 'data')",  # (2 layers, 128, 32)
    }


def test_checkpoints_move_between_device_counts(four_devices):
    """Stopped at step 4 (checkpoint) on one layout, resumed on the other: the uninterrupted 1-device run's
    losses, records on disk and final parameters."""
    r = four_devices
    for moved in ("one_to_four_fsdp", "four_fsdp_to_one"):
        _close(r[moved]["losses"], r["one"]["losses"])
        assert r[moved]["steps_on_disk"] == list(range(1, 9)) + [8]  # losses 1..8, then the evaluation
        assert r[moved]["max_param_diff"] < 1e-5
    assert r["bad_batch"].startswith("a batch of 6 examples does not split evenly over 4 devices")


@pytest.mark.slow
def test_inrank_on_four_devices(tmp_path):
    """InRank-Efficient with FSDP on 4 devices (rank checks on sharded factors, the switch to fixed rank): the
    1-device ranks, and explained ratios and losses to rounding."""
    _finish(_subprocess(["inrank", tmp_path], devices=4))
    r = json.loads((tmp_path / "result.json").read_text())
    _close(r["four"]["losses"], r["one"]["losses"])
    assert [rec["step"] for rec in r["four"]["ranks"]] == [2, 4, 4]
    for four, one in zip(r["four"]["ranks"], r["one"]["ranks"], strict=True):
        for name in ("fc_in", "fc_out"):
            assert four[name]["rank"] == one[name]["rank"]
            _close(four[name].get("explained_ratio", []), one[name].get("explained_ratio", []))


@pytest.mark.slow
def test_two_processes_on_localhost(tmp_path):
    """``gradflow gpt`` as two ``jax.distributed`` processes of 2 CPU devices each (gloo collectives: one 4-device
    mesh, FSDP, each process feeding its devices' part of every batch, process 0 alone writing) gives the losses of
    the same command on this process's one device."""
    from gradflow._cli import main

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    argv = ["gpt", "--steps", "8", "--batch-size", "8", "--sharding", "fsdp", "--no-progress"]
    distributed = ["--coordinator", f"localhost:{port}", "--num-processes", "2"]
    procs = [
        _subprocess(["-m", *argv, *distributed, "--process-id", i, "--out", tmp_path / "two"], devices=2)
        for i in range(2)
    ]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    for p in procs:
        _finish(p)
    one, two = (read_metrics(tmp_path / f / "scale_1" / "metrics.jsonl") for f in ("one", "two"))
    assert [m["step"] for m in two] == [m["step"] for m in one] == [5, 8, 8]  # written once: by process 0
    _close([m.get("loss", m.get("eval_loss")) for m in two], [m.get("loss", m.get("eval_loss")) for m in one])
    assert "4 device(s) in 2 process(es)" in (tmp_path / "two" / "report.md").read_text()


# ----------------------------------------------------------------------------- the subprocesses


def _setup():
    import jax
    from nets_common import text, tiny_recipe

    from gradflow.nets import GPT, gpt_config

    data = dataclasses.replace(text(), valid=text().valid[:3000])
    cfg = dataclasses.replace(gpt_config("gpt2-tiny"), vocab_size=data.vocab_size)
    adamw = dict(optimizer="adamw", weight_decay=0.1, grad_clip=1.0)
    recipe = tiny_recipe(8, warmup=2, batch_size=8, log_every=1, checkpoint_every=4, n_spectra=2, eval_batch_size=32)
    recipe = dataclasses.replace(recipe, eval_every=8, **adamw)
    return (lambda: GPT(cfg, key=jax.random.key(0))), recipe, data


def _summary(result, reference=None, out=None) -> dict:
    import equinox as eqx
    import jax

    from gradflow.nets import read_metrics
    from gradflow.nets._distributed import to_host

    summary = {
        "losses": [m["loss"] for m in result.metrics if "loss" in m],
        "eval_loss": result.evaluation.get("eval_loss"),
    }
    if reference is not None:
        a, b = (jax.tree_util.tree_leaves(to_host(eqx.filter(m, eqx.is_array))) for m in (result.model, reference))
        scale = max(float(np.abs(x).max()) for x in b)
        summary["max_param_diff"] = max(float(np.abs(x - y).max()) for x, y in zip(a, b)) / scale
    if out is not None:
        summary["steps_on_disk"] = [m["step"] for m in read_metrics(pathlib.Path(out) / "metrics.jsonl")]
    return summary


def _single_process(folder: pathlib.Path) -> None:
    import equinox as eqx
    import jax

    from gradflow.nets import train

    build, recipe, data = _setup()
    fsdp = dataclasses.replace(recipe, sharding="fsdp")
    kw = dict(progress=False)
    one = train(build(), recipe, data, devices=1, out=folder / "one", **kw)
    r = {"devices": jax.device_count(), "one": _summary(one)}
    for name, config in (("ddp", recipe), ("fsdp", fsdp)):
        run = train(build(), config, data, devices=4, **kw)
        r[name] = _summary(run, one.model)
        params = eqx.filter(run.model, eqx.is_inexact_array)
        r[name]["sharded"] = sorted(
            (f"params{jax.tree_util.keystr(p)}", str(a.sharding.spec))
            for p, a in jax.tree_util.tree_leaves_with_path(params)
            if "data" in str(a.sharding.spec)
        )
    for name, (first, second) in {
        "one_to_four_fsdp": ((recipe, 1), (fsdp, 4)),
        "four_fsdp_to_one": ((fsdp, 4), (recipe, 1)),
    }.items():
        out = folder / name
        train(build(), first[0], data, devices=first[1], out=out, stop_after=4, **kw)
        run = train(build(), second[0], data, devices=second[1], out=out, resume=True, **kw)
        r[name] = _summary(run, one.model, out)
    try:
        train(build(), dataclasses.replace(recipe, batch_size=6), data, devices=4, **kw)
    except ValueError as e:
        r["bad_batch"] = str(e)
    (folder / "result.json").write_text(json.dumps(r))


def _inrank(folder: pathlib.Path) -> None:
    from gradflow.nets._inrank import InRankConfig
    from gradflow.nets._inrank_train import train_inrank

    build, recipe, data = _setup()
    inrank = InRankConfig(init_rank=2, buffer=4, check_every=2, efficient_after=4)
    r = {}
    for name, config, n in (("one", recipe, 1), ("four", dataclasses.replace(recipe, sharding="fsdp"), 4)):
        run = train_inrank(build(), config, data, inrank=inrank, devices=n)
        r[name] = {"losses": [m["loss"] for m in run.metrics if "loss" in m], "ranks": run.ranks}
    (folder / "result.json").write_text(json.dumps(r))


if __name__ == "__main__":
    if sys.argv[1] == "single":
        _single_process(pathlib.Path(sys.argv[2]))
    else:
        _inrank(pathlib.Path(sys.argv[2]))
