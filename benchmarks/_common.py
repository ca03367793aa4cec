"""What bench_vit.py and bench_gpt.py share: options, the device's peak, FLOP counts, timing of gradflow's own
training step and of a PyTorch step, the results table, ``--record`` and ``--json``.

FLOPs (model FLOPs, as in PaLM's appendix B): a weight matrix of ``P`` entries applied to ``T`` tokens costs
``2·P·T`` forward, ``2·P·T`` for the input gradient and ``2·P·T`` for its own gradient: ``6·P·T`` trained,
``4·P·T`` frozen (InRank's ``W_0``). Attention adds, per layer and head, ``QKᵀ`` and ``softmax·V``:
``2·T²·d_head`` each forward, three times that with the backward pass: ``12·L·H·T²·d_head`` per sequence (the
causal mask is not discounted). So, per sequence of ``T`` tokens,

    FLOPs = 6·N·T + 4·N_frozen·T + 12·L·H·T²·d_head

with ``N`` the trained matmul weights applied to every token (Q/K/V/O, MLP, GPT's tied LM head; the ViT's patch
embedding and head enter with the tokens they see: ``n_patches`` and 1). Embedding look-ups, LayerNorm, softmax,
GELU and the optimiser are not counted, nor is the recomputation of ``remat`` (this is MFU, not HFU).
MFU = FLOPs per step / seconds per step / the device's dense bf16 peak (``PEAK_BF16``; none for CPUs).

Timing: ``--warmup`` untimed steps (compilation), then ``--steps`` steps queued back to back and one wait at the
end, for JAX and PyTorch alike. The JAX rows time gradflow's training step (``_step.make_step``: the step of
``nets.train`` and ``nets.train_inrank``) on synthetic data already on the device; its memory is XLA's for the
compiled step (arguments + temporaries + outputs not aliased to donated arguments). The PyTorch rows run bf16
autocast with float32 master weights (gradflow's mixed precision), ``torch.compile`` where it works (the row says
when it fell back to eager) and a fused optimiser; their memory is ``torch.cuda.max_memory_allocated()``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing gradflow
    sys.path.insert(0, str(ROOT))
# JAX would otherwise take 75 % of the GPU's memory at start, leaving too little to the PyTorch rows
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from gradflow.nets._configs import ATTENTION_IMPLEMENTATIONS  # noqa: E402

# Dense bf16 tensor-core peaks (FLOP/s) by device-kind substring, most specific first.
PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("GH200", 989e12),
    ("H200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A10G", 125e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("V100", 125e12),  # fp16
    ("TPU v4", 275e12),
    ("TPU v5", 197e12),
)


def device_info() -> tuple[str, float | None]:
    """``(device kind, dense bf16 peak FLOP/s or None)``."""
    kind = jax.devices()[0].device_kind
    return kind, next((p for name, p in PEAK_BF16 if name.lower() in kind.lower()), None)


def peak_memory_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def matmul_flops(params: int, tokens: int, *, trained: bool = True) -> float:
    """Training FLOPs of a ``params``-entry weight matrix applied to ``tokens`` tokens (6 or 4 per entry and token)."""
    return (6.0 if trained else 4.0) * params * tokens


def attention_flops(*, tokens: int, n_layers: int, n_heads: int, d_head: int) -> float:
    """Training FLOPs of ``QKᵀ`` and ``softmax·V`` for one sequence: ``12·L·H·T²·d_head``."""
    return 12.0 * n_layers * n_heads * tokens**2 * d_head


def transformer_flops(*, p_matmul: int, tokens: int, n_layers: int, n_heads: int, d_head: int) -> float:
    """``6·N·T + 12·L·H·T²·d_head``: one sequence through ``N`` trained matmul weights and ``L`` layers."""
    return matmul_flops(p_matmul, tokens) + attention_flops(
        tokens=tokens, n_layers=n_layers, n_heads=n_heads, d_head=d_head
    )


def compute_dtype(option: str):
    """``--dtype``: ``auto`` is gradflow's default (bf16 on GPU/TPU, float32 on CPU)."""
    from gradflow.nets import default_compute_dtype

    return default_compute_dtype() if option == "auto" else jnp.dtype(option)


def parser(doc: str, *, config: str, configs: str, steps: int, warmup: int) -> argparse.ArgumentParser:
    """The options of both scripts."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--config", default=config, help=f"model config: {configs}")
    p.add_argument("--batch-size", type=int, default=None, help="examples per step (default: see the docstring)")
    p.add_argument("--steps", type=int, default=steps, help="timed steps")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps first (compilation)")
    p.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float32"),
        default="auto",
        help="compute dtype (auto: bf16 on GPU/TPU, float32 on CPU)",
    )
    p.add_argument(
        "--attention",
        choices=(*ATTENTION_IMPLEMENTATIONS, "both"),
        default="both",
        help="gradflow's attention (the model config's `attention`); both: auto and xla side by side",
    )
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    p.add_argument(
        "--record",
        nargs="?",
        const=str(ROOT / "docs" / "benchmarks.md"),
        default=None,
        help="append the table to docs/benchmarks.md (or the given file)",
    )
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    return p


def attention_modes(option: str) -> tuple[str, ...]:
    """``--attention``: the model configs' ``attention`` values to time, each a row."""
    return ("auto", "xla") if option == "both" else (option,)


def time_steps(run_step, wait, n_steps: int, n_warmup: int) -> float:
    """Seconds per step of ``run_step()``: ``n_warmup`` steps, a ``wait()``, then ``n_steps`` queued back to back
    and one ``wait()`` for the device to finish them."""
    for _ in range(n_warmup):
        run_step()
    wait()
    t0 = time.perf_counter()
    for _ in range(n_steps):
        run_step()
    wait()
    return (time.perf_counter() - t0) / n_steps


def row(name: str, step_s: float, items_per_step: int, flops: float, mem: int | None) -> dict:
    """One measurement, also printed at once (a run cut short keeps the rows it measured in its log)."""
    peak = device_info()[1]
    r = {
        "name": name,
        "step_s": step_s,
        "per_s": items_per_step / step_s,
        "flops": flops,
        "mfu": None if peak is None else flops / step_s / peak,
        "mem_mb": None if mem is None else mem / 2**20,
    }
    print(f"measured: {json.dumps(r)}", flush=True)
    return r


def bench_jax(
    name: str,
    model,
    arrays,
    *,
    kind: str,
    config,
    dtype,
    trainable,
    items_per_step: int,
    flops: float,
    n_steps: int,
    n_warmup: int,
) -> dict:
    """Time gradflow's training step (``_step.make_step`` with ``config``'s optimiser) on ``model``'s
    ``trainable`` leaves, a batch of ``config.batch_size`` examples of ``arrays`` (as ``nets.train`` holds them),
    on one device."""
    from gradflow.nets._distributed import make_layout
    from gradflow.nets._optim import make_optimizer, optimizer_key
    from gradflow.nets._step import compiled_step, split_model
    from gradflow.nets._train import MeanLoss

    layout = make_layout(1)
    params, frozen, static = split_model(model, trainable)
    params = jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), params)  # donated: keep `model` valid
    opt_state = make_optimizer(config).init(params)
    idx = jnp.arange(config.batch_size, dtype=jnp.int32).reshape(config.n_micro, -1)
    lr = jnp.float32(1e-4)
    step = compiled_step(MeanLoss(kind, jnp.dtype(dtype)), optimizer_key(config)).step
    # called without the static `static` and `layout`
    compiled = step.lower(params, opt_state, frozen, static, layout, arrays, idx, lr).compile()
    ma = compiled.memory_analysis()
    mem = (
        None
        if ma is None
        else (ma.argument_size_in_bytes + ma.temp_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes)
    )
    state = [params, opt_state, None]

    def run():
        state[0], state[1], state[2], _ = compiled(state[0], state[1], frozen, arrays, idx, lr)

    sec = time_steps(run, lambda: jax.block_until_ready(state), n_steps, n_warmup)
    attention = "cuDNN fused attention" if "cudnn$fmha" in compiled.as_text() else "XLA attention"
    return row(f"JAX gradflow {name} ({jnp.dtype(dtype).name}, {attention})", sec, items_per_step, flops, mem)


def bench_torch(
    name: str,
    build,
    batch,
    loss_fn,
    make_optimizer,
    *,
    n_steps: int,
    n_warmup: int,
    items_per_step: int,
    flops: float,
    clip: float | None = None,
) -> dict:
    """Time a PyTorch training step of the model ``build()``: ``loss_fn(model, batch)`` under bf16 autocast (CUDA),
    backward, optional gradient clipping, a step of ``make_optimizer(params, fused)``. The model is
    ``torch.compile``d; if that fails, eager. Its GPU memory is released afterwards (for the JAX rows)."""
    import gc

    import torch

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    wait = torch.cuda.synchronize if cuda else (lambda: None)

    def measure():
        model = build().to(dev)
        data = tuple(b.to(dev) for b in batch)
        opt = make_optimizer(model.parameters(), cuda)

        def step(m):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=cuda):
                loss = loss_fn(m, data)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()

        if cuda:
            torch.cuda.reset_peak_memory_stats()
        mode = "torch.compile"
        try:
            compiled = torch.compile(model)
            step(compiled)  # compiles
            run = lambda: step(compiled)  # noqa: E731
        except Exception as e:  # noqa: BLE001 -- whatever the compiler's failure: time eager instead, and say so
            print(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); timing eager PyTorch", file=sys.stderr)
            torch._dynamo.reset()
            mode, run = "eager", (lambda: step(model))
        return time_steps(run, wait, n_steps, n_warmup), (torch.cuda.max_memory_allocated() if cuda else None), mode

    sec, mem, mode = measure()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row(f"PyTorch {name} ({'bf16 autocast' if cuda else 'float32'}, {mode})", sec, items_per_step, flops, mem)


def results_table(rows: list[dict], unit: str) -> str:
    """Markdown table of benchmark rows, throughput relative to the first."""
    head = ["implementation", unit, "ms/step", "TFLOP/s", "MFU", "step memory MB", "vs first row"]
    lines = table_head(head)
    base = rows[0]["per_s"]
    for r in rows:
        mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        mem = "n/a" if r["mem_mb"] is None else f"{r['mem_mb']:.1f}"
        lines.append(
            _cells(
                [
                    r["name"],
                    f"{r['per_s']:.4g}",
                    f"{1e3 * r['step_s']:.2f}",
                    f"{r['flops'] / r['step_s'] / 1e12:.3g}",
                    mfu,
                    mem,
                    f"{r['per_s'] / base:.2f}×",
                ]
            )
        )
    lines += [
        "",
        "Step memory: JAX rows, XLA's compiled step (arguments + temporaries + non-donated outputs); "
        "PyTorch rows, `torch.cuda.max_memory_allocated()` over its run. Device peak over the whole "
        f"process (`memory_stats()`): {_mb(peak_memory_bytes())}.",
    ]
    return "\n".join(lines)


def table_head(head) -> list[str]:
    """The first two lines of a Markdown table: the column names and the rule under them."""
    return [_cells(head), _cells(["---"] * len(head))]


def _cells(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _mb(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:.0f} MB"


def header(title: str, argv) -> str:
    kind, peak = device_info()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    peak_s = "unknown (no MFU)" if peak is None else f"{peak / 1e12:.0f} TFLOP/s dense bf16"
    return (
        f"## {title}\n\n{stamp}; device **{kind}** ({jax.default_backend()}, peak {peak_s}); "
        f"jax {jax.__version__}, equinox {eqx.__version__}{_torch_version()}; `{' '.join(argv) or 'defaults'}`\n"
    )


def _torch_version() -> str:
    try:
        import torch
    except ImportError:
        return ""
    return f", torch {torch.__version__}"


def finish(args, argv, title: str, rows: list[dict], unit: str, notes: list[str]) -> str:
    """Print the section (header, table, notes); append it to ``--record``'s file and write ``--json``."""
    section = "\n".join([header(title, argv), results_table(rows, unit), *([""] + notes if notes else []), ""])
    print(section)
    if args.record:
        path = pathlib.Path(args.record)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(section.rstrip() + "\n\n")
    if args.json:
        pathlib.Path(args.json).write_text(
            json.dumps(
                {
                    "title": title,
                    "device": device_info()[0],
                    "unit": unit,
                    "argv": list(argv),
                    "rows": rows,
                    "notes": notes,
                },
                indent=1,
            )
        )
    return section


def cpu_name() -> str:
    """The CPU's model name (``lscpu``), for the CPU benchmarks' machine line."""
    import platform
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown CPU"


def record_section(path: pathlib.Path, title: str, text: str) -> None:
    """Put ``text`` (starting with its ``## title`` heading) into the Markdown file ``path``: in place of the
    section of that title if there is one, else at the end."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    heading = f"## {title}"
    start = old.find(heading + "\n")  # the whole heading line: "## Solver cost" is not "## Solver cost against …"
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    else:
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + text.rstrip("\n") + "\n" + (old[end:] if end >= 0 else "")
    path.write_text(new)


def cpu_table_section(script: str, title: str, header, rows, details: str, record: bool) -> None:
    """Print, and with ``record`` put into docs/benchmarks.md, a CPU benchmark's section ``title``: the command that
    ran ``script``, the machine, ``details`` and the table of ``rows`` under ``header``."""
    command = " ".join(["python", f"benchmarks/{script}", *sys.argv[1:]])
    intro = f"`{command}` (see its docstring). Machine: {cpu_name()}, {os.cpu_count()} cores, no GPU. {details}"
    lines = table_head(header) + [_cells(row) for row in rows]
    show(f"## {title}\n\n{intro}\n\n" + "\n".join(lines), title, record)


def show(text: str, title: str, record: bool) -> None:
    """Print a section's ``text`` and, if ``record``, put it into docs/benchmarks.md under ``## title``."""
    print(text)
    if record:
        record_section(ROOT / "docs" / "benchmarks.md", title, text)


def torch_missing(*modules: str) -> str | None:
    """None if ``torch`` and ``modules`` import, else the note saying which is missing."""
    import importlib

    for name in ("torch", *modules):
        try:
            importlib.import_module(name)
        except ImportError:
            return f"{name} is not installed: no PyTorch row."
    return None
