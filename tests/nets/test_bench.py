"""The GPU benchmarks and runbook (benchmarks/): FLOP counts against XLA's, CPU smoke runs, the runbook's commands."""

import dataclasses
import importlib.util
import json
import pathlib
import tarfile

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _xla_flops(loss, params, *args) -> float:
    """XLA's count of the floating-point operations of the compiled value and gradient of ``loss``."""
    cost = jax.jit(jax.value_and_grad(loss)).lower(params, *args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


def test_matmul_and_attention_flops_match_xla():
    """6·P·T for a trained weight, 4·P·T for a frozen one (no gradient of its own), 12·T²·d for one attention head:
    XLA's count of the gradient's operations, to the elementwise operations it counts on top (measured: 0.3 %,
    0.4 %, 1.3 % with the softmax)."""
    common = _load("_common")
    x, w = jnp.ones((256, 64)), jnp.ones((64, 128))
    trained = _xla_flops(lambda xw: jnp.sum(xw[0] @ xw[1]), (x, w))
    frozen = _xla_flops(lambda x, w: jnp.sum(x @ jax.lax.stop_gradient(w)), x, w)
    np.testing.assert_allclose(trained, common.matmul_flops(64 * 128, 256), rtol=0.005)
    np.testing.assert_allclose(frozen, common.matmul_flops(64 * 128, 256, trained=False), rtol=0.005)
    q = 0.01 * jnp.ones((3, 256, 64))
    attention = _xla_flops(lambda qkv: jnp.sum(jax.nn.softmax(qkv[0] @ qkv[1].T, -1) @ qkv[2]), q)
    expected = common.attention_flops(tokens=256, n_layers=1, n_heads=1, d_head=64)
    assert expected <= attention <= 1.02 * expected


@pytest.mark.parametrize("which", ["vit", "gpt", "gpt-inrank"])
def test_model_flops_match_xla(which):
    """The benchmarks' model FLOPs of a one-layer ViT, GPT and InRank GPT (W_0 frozen, U V trained at their
    allocated width) against XLA's count of the training gradient: at most 8 % below it, XLA also counting
    LayerNorm, GELU, softmax and the loss (measured: 6.9 %, 6.0 %, 6.2 %). One layer: XLA counts the body of the
    layer scan once."""
    from gradflow.nets import GPT, InRankConfig, ViT, gpt_config, to_inrank, vit_config
    from gradflow.nets._inrank import trainable

    if which == "vit":
        cfg = dataclasses.replace(vit_config("tiny"), n_layers=1, image_size=16, patch=4, d_emb=64, d_head=16)
        cfg = dataclasses.replace(cfg, d_mlp=256)
        model, inputs = ViT(cfg, key=jax.random.key(0)), jnp.zeros((2, 16, 16, 1))
        expected = 2 * _load("bench_vit").vit_flops(cfg, cfg.d_head)
        loss = lambda m, x: jnp.sum(jax.vmap(m)(x))
    else:
        cfg = dataclasses.replace(gpt_config("gpt2-tiny"), n_layers=1, d_emb=64, d_head=16, d_mlp=256, context=256)
        model, inputs = GPT(cfg, key=jax.random.key(0)), jnp.zeros((2, cfg.context + 1), jnp.int32)
        if which == "gpt-inrank":
            zeros = {n: jnp.zeros_like(getattr(model.blocks.mlp, n).weight) for n in ("fc_in", "fc_out")}
            model = to_inrank(model, zeros, config=InRankConfig(init_rank=2, buffer=4, max_rank=16))
        expected = _load("bench_gpt").gpt_flops(model, 2)

        def loss(m, tokens):
            logits = jax.vmap(m)(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    params, static = eqx.partition(model, trainable(model))
    counted = _xla_flops(lambda p, x: loss(eqx.combine(p, static), x), params, inputs)
    assert expected <= counted <= 1.08 * expected


def test_peak_table():
    """MFU needs the device's peak: CPUs have none, GPUs a dense bf16 peak above 10 TFLOP/s."""
    kind, peak = _load("_common").device_info()
    assert peak is None if jax.default_backend() == "cpu" else peak > 1e13, kind


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, argv, unit, n_rows",
    [
        ("bench_vit", ["--config", "tiny"], "images/s", 2),  # attention auto and xla
        ("bench_gpt", ["--config", "gpt2-tiny", "--remat", "on", "--attention", "xla"], "tokens/s", 3),
    ],
)
def test_benchmark_smoke(tmp_path, name, argv, unit, n_rows):
    out = tmp_path / "benchmarks.md"
    section = _load(name).main(
        [
            *argv,
            "--steps",
            "2",
            "--warmup",
            "1",
            "--no-torch",
            "--record",
            str(out),
            "--json",
            str(tmp_path / "rows.json"),
        ]
    )
    assert out.read_text().strip() == section.strip()
    assert unit in section and f"device **{jax.devices()[0].device_kind}**" in section
    rows = [line for line in section.splitlines() if line.startswith("| JAX")]
    assert len(rows) == n_rows and all(float(line.split("|")[2]) > 0 for line in rows)
    assert len(json.loads((tmp_path / "rows.json").read_text())["rows"]) == n_rows


def test_runbook_commands():
    """The GPU commands: the paper ViT at two scales, GPT-2 small, InRank-Efficient against full rank."""
    session = _load("gpu_session")
    work = pathlib.Path("w")
    (vit,) = session.commands("vit", work, smoke=False)
    assert vit[1:4] == ["-m", "gradflow", "vit"] and "paper" in vit
    assert vit[vit.index("--init-scale") + 1 :][:2] == ["1", "0.1"]
    (inrank,) = session.commands("inrank", work, smoke=False)
    assert "gpt2-small" in inrank and inrank[inrank.index("--modes") + 1 :][:2] == ["full", "inrank-efficient"]
    (gpt,) = session.commands("bench-gpt", work, smoke=False)
    assert gpt[1].endswith("bench_gpt.py") and "--config" not in gpt  # default gpt2-small
    assert gpt[gpt.index("--remat") + 1] == "on" and "--attention" not in gpt  # attention auto and xla
    documented = [
        line.split("gpu_session.py", 1)[1].split("--")[0].split()
        for line in (ROOT / "docs" / "networks.md").read_text().splitlines()
        if line.startswith("PYTHONPATH=. /opt/torch/.venv/bin/python3 benchmarks/gpu_session.py")
    ]
    assert sorted(p for parts in documented if "all" not in parts for p in parts) == sorted(session.PARTS)


@pytest.mark.slow
def test_gpu_session_smoke(tmp_path):
    """Every part of the runbook on tiny configs; a second call resumes (reloads, skips the finished tables)."""
    session = _load("gpu_session")
    argv = ["all", "--smoke", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--budget", "3000"]
    assert session.main(argv) == 0
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == sorted(f"{part}.{ext}" for part in session.PARTS for ext in ("md", "tar.gz"))  # ≤ 8 come back
    for part in session.PARTS:
        text = (tmp_path / "out" / f"{part}.md").read_text()
        assert "**ok**" in text and "(not written)" not in text, text
    with tarfile.open(tmp_path / "out" / "vit.tar.gz") as tar:
        names = tar.getnames()
    assert {"vit/report.md", "vit/figures/stable_rank_by_layer.png", "vit.log"} <= set(names)
    assert not any("checkpoint" in n for n in names)
    rows = json.loads((tmp_path / "work" / "smoke" / "bench-gpt.json").read_text())["rows"]
    assert len([r for r in rows if r["name"].startswith("JAX")]) == 6  # 3 parameterisations × attention auto/xla
    assert session.main(argv) == 0
    assert "already done" in (tmp_path / "out" / "bench-vit.md").read_text()
