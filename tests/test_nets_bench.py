"""The GPU benchmarks and runbook (benchmarks/): FLOP counts, CPU smoke runs, what gradflow needs on a GPU machine."""

import ast
import importlib.util
import json
import pathlib
import sys
import tarfile

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# what the GPU machine has (/opt/torch/.venv: jax, equinox, optax, diffrax, matplotlib (+ Pillow), sympy,
# scikit-learn (+ scipy), timm, transformers (+ tqdm), torch), plus diffrax's optimistix
GPU_MACHINE = {
    "numpy",
    "scipy",
    "jax",
    "equinox",
    "optax",
    "diffrax",
    "optimistix",
    "lineax",
    "matplotlib",
    "PIL",
    "sympy",
    "sklearn",
    "tqdm",
    "torch",
    "timm",
    "transformers",
}


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flop_formulas():
    common = _load("_common")
    # one layer, one head: 6·N·T + 12·L·H·T²·d_head; a frozen matrix costs 4 per entry and token
    assert common.transformer_flops(p_matmul=10, tokens=3, n_layers=1, n_heads=1, d_head=2) == 6 * 10 * 3 + 12 * 9 * 2
    assert common.matmul_flops(10, 3, trained=False) == 4 * 10 * 3
    assert common.device_info()[1] is None or common.device_info()[1] > 1e13
    # the paper ViT: patch embedding on the 64 patches, blocks on 65 tokens, head on the class token
    from gradflow.nets import GPT, gpt_config, vit_config

    c = vit_config("paper")
    per_layer = 4 * 512 * 8 * 128 + 2 * 512 * 512
    expected = 6 * (16 * 3 * 512 * 64 + 6 * per_layer * 65 + 512 * 10) + 12 * 6 * 8 * 65**2 * 128
    assert _load("bench_vit").vit_flops(c, c.d_head) == expected
    # a GPT: attention and MLP weights and the tied LM head on every token
    g = GPT(gpt_config("gpt2-tiny"), key=jax.random.key(0))
    cfg = g.config
    matmul = cfg.n_layers * (4 * cfg.d_emb**2 + 2 * cfg.d_emb * cfg.d_mlp) + cfg.vocab_size * cfg.d_emb
    assert _load("bench_gpt").gpt_flops(g, 2) == 2 * (
        6 * matmul * cfg.context + 12 * cfg.n_layers * cfg.d_emb * cfg.context**2
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, argv, unit, n_rows",
    [
        ("bench_vit", ["--config", "tiny"], "images/s", 1),
        ("bench_gpt", ["--config", "gpt2-tiny", "--remat", "on"], "tokens/s", 3),
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
    assert gpt[1].endswith("bench_gpt.py") and "--config" not in gpt  # defaults: gpt2-small, remat on and off
    documented = [
        line.split("gpu_session.py", 1)[1].split("--")[0].split()
        for line in (ROOT / "docs" / "networks.md").read_text().splitlines()
        if line.startswith("PYTHONPATH=. /opt/torch/.venv/bin/python3 benchmarks/gpu_session.py")
    ]
    assert sorted(p for parts in documented if "all" not in parts for p in parts) == sorted(session.PARTS)


def test_gpu_machine_has_what_gradflow_imports():
    """gradflow and the benchmark scripts import nothing beyond the standard library and the GPU machine's packages
    (gradflow is not installed there: it runs with PYTHONPATH=.)."""
    files = [
        *(ROOT / "gradflow").rglob("*.py"),
        *(ROOT / "benchmarks").glob("bench_[vg]*.py"),
        ROOT / "benchmarks" / "_common.py",
        ROOT / "benchmarks" / "gpu_session.py",
    ]
    imported = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) - GPU_MACHINE - {"gradflow", "_common"} == set()


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
    assert len([r for r in rows if r["name"].startswith("JAX")]) == 6  # 3 parameterisations × remat on/off
    assert session.main(argv) == 0
    assert "already done" in (tmp_path / "out" / "bench-vit.md").read_text()
