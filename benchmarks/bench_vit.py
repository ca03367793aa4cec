"""Training throughput of the paper ViT: images/s, model FLOPs utilisation, peak memory; PyTorch (timm) alongside.

    python benchmarks/bench_vit.py                       # paper ViT (CIFAR size), batch 512, bf16 on GPU
    python benchmarks/bench_vit.py --config tiny         # seconds on CPU
    python benchmarks/bench_vit.py --record              # also append a section to docs/benchmarks.md

FLOPs per training step (forward + backward = 3 × forward, multiply–add = 2 FLOPs), for T tokens per image:

    6 · P_matmul · T  +  12 · n_layers · T² · n_heads · d_head      per image

where P_matmul counts the weights of the matrix multiplies (patch embedding, Q/K/V/O, MLP, head) and the
second term is QKᵀ and the attention-weighted sum of values. MFU = FLOPs per step / step time / the device's
dense bf16 peak (table ``PEAK_BF16``; none for CPUs). The timed steps use synthetic data already on the
device (the input pipeline is not measured).

PyTorch: when ``torch`` and ``timm`` import, timm's ``VisionTransformer`` with the same width, depth, heads,
MLP width, patch and batch is timed in the same run (bf16 autocast, AdamW). timm ties the head dimension to
``d_emb / n_heads`` (64 for the paper ViT, whose heads are 128 wide), so its FLOPs are computed from its own
shapes and the table compares both throughput and MFU.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

# Dense bf16 tensor-core peaks (FLOP/s) by device-kind substring, most specific first.
PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("GH200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A10G", 125e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("V100", 125e12),  # fp16
    ("TPU v4", 275e12),
    ("TPU v5", 197e12),
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def device_info() -> tuple[str, float | None]:
    """``(device kind, dense bf16 peak FLOP/s or None)``."""
    kind = jax.devices()[0].device_kind
    return kind, next((p for name, p in PEAK_BF16 if name.lower() in kind.lower()), None)


def peak_memory_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def time_steps(run_step, n_steps: int, n_warmup: int) -> float:
    """Seconds per step of ``run_step()`` (which must block until its work is done), after warm-up steps."""
    for _ in range(n_warmup):
        run_step()
    t0 = time.perf_counter()
    for _ in range(n_steps):
        run_step()
    return (time.perf_counter() - t0) / n_steps


def transformer_flops(*, p_matmul: int, tokens: int, n_layers: int, n_heads: int, d_head: int) -> float:
    """Training FLOPs for one sequence of ``tokens`` tokens (see the module docstring)."""
    return 6.0 * p_matmul * tokens + 12.0 * n_layers * tokens**2 * n_heads * d_head


def make_jax_step(loss_fn, model, compute_dtype, *, trainable=eqx.is_inexact_array, lr: float = 1e-4):
    """Adam step on the ``trainable`` leaves of ``model`` with a ``compute_dtype`` copy of the weights.

    Returns ``(step, state)``: ``step(batch, params, opt_state) -> (params, opt_state, loss)`` is a
    ``jax.jit`` function donating ``params`` and ``opt_state``; ``state = (params, opt_state)``.
    """
    from gradflow.nets._layers import cast_floating

    params, static = eqx.partition(model, trainable)
    params = jax.tree_util.tree_map(lambda a: jnp.array(a, copy=True), params)  # donated: keep `model` valid
    opt = optax.adam(lr)

    def step(batch, params, opt_state):
        def f(p):
            return loss_fn(cast_floating(eqx.combine(p, static), compute_dtype), batch)

        loss, g = jax.value_and_grad(f)(params)
        updates, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(1, 2)), (params, opt.init(params))


def run_and_time(step, batch, state, n_steps: int, n_warmup: int) -> tuple[float, int | None]:
    """``(seconds per step, XLA's memory for one step in bytes)``: arguments + temporaries + outputs not
    aliased to donated arguments, from the compiled executable (None where the backend does not say)."""
    ma = step.lower(batch, *state).compile().memory_analysis()
    mem = None if ma is None else (ma.argument_size_in_bytes + ma.temp_size_in_bytes + ma.output_size_in_bytes
                                   - ma.alias_size_in_bytes)
    holder = [state]

    def run():
        p, o, loss = step(batch, *holder[0])
        loss.block_until_ready()
        holder[0] = (p, o)

    return time_steps(run, n_steps, n_warmup), mem


def fmt_row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def results_table(rows: list[dict], unit: str) -> str:
    """Markdown table of benchmark rows (``name, per_s, step_ms, tflops, mfu, peak_mb, ratio``)."""
    head = ["implementation", unit, "ms/step", "TFLOP/s", "MFU", "step memory MB", "vs JAX"]
    lines = [fmt_row(head), fmt_row(["---"] * len(head))]
    base = rows[0]["per_s"]
    for r in rows:
        mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        mem = "n/a" if r["peak_mb"] is None else f"{r['peak_mb']:.1f}"
        lines.append(fmt_row([r["name"], f"{r['per_s']:.4g}", f"{1e3 * r['step_s']:.2f}", f"{r['flops'] / r['step_s'] / 1e12:.3g}",
                              mfu, mem, f"{r['per_s'] / base:.2f}×"]))
    lines.append("")
    lines.append("Step memory: JAX rows, XLA's compiled-step memory (arguments + temporaries + non-donated outputs); "
                 "PyTorch rows, `torch.cuda.max_memory_allocated()` over its run. "
                 f"Device peak over the whole process (`memory_stats()`): {_mb(peak_memory_bytes())}.")
    return "\n".join(lines)


def _mb(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:.0f} MB"


def record(section: str, path) -> None:
    """Append ``section`` to the benchmarks Markdown file."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(section.rstrip() + "\n\n")


def header(title: str, argv) -> str:
    kind, peak = device_info()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    peak_s = "unknown (no MFU)" if peak is None else f"{peak / 1e12:.0f} TFLOP/s dense bf16"
    return (f"## {title}\n\n{stamp}; device **{kind}** ({jax.default_backend()}, peak {peak_s}); "
            f"jax {jax.__version__}; `{' '.join(argv) or 'defaults'}`\n")


def row(name, step_s, per_step_items, flops, peak, mem):
    return {"name": name, "step_s": step_s, "per_s": per_step_items / step_s, "flops": flops,
            "mfu": None if peak is None else flops / step_s / peak, "peak_mb": None if mem is None else mem / 2**20}


# ----------------------------------------------------------------------------- ViT


def vit_p_matmul(c) -> int:
    attn = 4 * c.d_emb * c.n_heads * c.d_head
    return c.patch * c.patch * c.channels * c.d_emb + c.n_layers * (attn + 2 * c.d_emb * c.d_mlp) + c.d_emb * c.n_classes


def bench_jax(cfg, batch: int, steps: int, warmup: int, dtype) -> dict:
    from gradflow.nets._vit import ViT

    model = ViT(cfg, key=jax.random.PRNGKey(0))
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.normal(kx, (batch, cfg.image_size, cfg.image_size, cfg.channels), jnp.float32).astype(dtype)
    y = jax.random.randint(ky, (batch,), 0, cfg.n_classes, jnp.int32)

    def loss_fn(m, b):
        logits = jax.vmap(m)(b[0]).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, b[1]).mean()

    step, state = make_jax_step(loss_fn, model, dtype)
    sec, mem = run_and_time(step, (x, y), state, steps, warmup)
    tokens = cfg.n_patches + (cfg.pool == "cls")
    flops = batch * transformer_flops(p_matmul=vit_p_matmul(cfg), tokens=tokens, n_layers=cfg.n_layers,
                                      n_heads=cfg.n_heads, d_head=cfg.d_head)
    return row(f"JAX gradflow ViT ({jnp.dtype(dtype).name})", sec, batch, flops, device_info()[1], mem)


def bench_torch(cfg, batch: int, steps: int, warmup: int) -> dict | None:
    try:
        import timm  # noqa: F401
        import torch
        from timm.models.vision_transformer import VisionTransformer
    except ImportError:
        return None
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = VisionTransformer(img_size=cfg.image_size, patch_size=cfg.patch, in_chans=cfg.channels,
                              num_classes=cfg.n_classes, embed_dim=cfg.d_emb, depth=cfg.n_layers, num_heads=cfg.n_heads,
                              mlp_ratio=cfg.d_mlp / cfg.d_emb, class_token=cfg.pool == "cls",
                              global_pool="token" if cfg.pool == "cls" else "avg").to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, cfg.channels, cfg.image_size, cfg.image_size, device=dev)
    y = torch.randint(0, cfg.n_classes, (batch,), device=dev)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32

    def run():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=dtype, enabled=dev == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if dev == "cuda":
            torch.cuda.synchronize()

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sec = time_steps(run, steps, warmup)
    mem = torch.cuda.max_memory_allocated() if dev == "cuda" else None
    d_head = cfg.d_emb // cfg.n_heads
    tcfg = dataclasses.replace(cfg, d_head=d_head)
    tokens = cfg.n_patches + (cfg.pool == "cls")
    flops = batch * transformer_flops(p_matmul=vit_p_matmul(tcfg), tokens=tokens, n_layers=cfg.n_layers,
                                      n_heads=cfg.n_heads, d_head=d_head)
    return row(f"PyTorch timm ViT (head dim {d_head})", sec, batch, flops, device_info()[1], mem)


def main(argv=None) -> str:
    from gradflow.nets._configs import vit_config

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="paper", help="ViT config: paper (CIFAR, 32×32), vit-base-16, tiny")
    p.add_argument("--batch-size", type=int, default=None, help="default 512 (paper), 8 for tiny")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                   help="compute dtype (auto: bf16 on GPU/TPU, float32 on CPU)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    p.add_argument("--record", nargs="?", const=str(ROOT / "docs" / "benchmarks.md"), default=None,
                   help="append the table to docs/benchmarks.md (or the given file)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    cfg = vit_config(args.config)
    batch = args.batch_size or (8 if args.config == "tiny" else 512)
    dtype = (jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16) if args.dtype == "auto" else jnp.dtype(args.dtype)
    rows = [bench_jax(cfg, batch, args.steps, args.warmup, dtype)]
    if not args.no_torch:
        torch_row = bench_torch(cfg, batch, args.steps, args.warmup)
        rows += [torch_row] if torch_row else []
    note = "" if len(rows) > 1 or args.no_torch else "\nPyTorch/timm not installed: no comparison row.\n"
    section = header(f"ViT training throughput: {args.config}, batch {batch}", argv) + "\n" + \
        results_table(rows, "images/s") + "\n" + note
    print(section)
    if args.record:
        record(section, args.record)
    return section


if __name__ == "__main__":
    main()
