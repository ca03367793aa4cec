"""Training throughput of GPT-2: tokens/s, MFU, peak memory; full rank vs InRank vs InRank-Efficient; PyTorch.

    python benchmarks/bench_gpt.py                       # GPT-2 small, context 1024, batch 16, bf16 on GPU
    python benchmarks/bench_gpt.py --config gpt2-tiny    # seconds on CPU
    python benchmarks/bench_gpt.py --record              # also append a section to docs/benchmarks.md

Rows (all JAX rows use the same jitted Adam step, ``bench_vit.make_jax_step``, on synthetic tokens;
InRank's frozen ``W_0`` is not trained and has no optimiser state):

- full rank: every weight trained;
- InRank phase: MLP matrices ``W_0 + U diag(m) V`` with ``U, V`` allocated at R columns (masked);
- InRank-Efficient after the switch: MLP matrices ``U* V*`` of fixed rank ``--rank`` (default 256, about the
  paper's 254 = 33 % of 768 for GPT-2 small);
- PyTorch: Hugging Face ``GPT2LMHeadModel`` of the same shape (no dropout, bf16 autocast, AdamW) when
  ``torch`` and ``transformers`` import.

FLOPs per training step: ``6 · P_matmul · B·T + 12 · n_layers · B·T² · n_heads · d_head`` with ``P_matmul`` the
weights of every matrix multiply actually executed (Q/K/V/O, the MLP factors as parameterised in that row, and the
tied LM head ``vocab × d_emb``); the causal mask is not discounted. MFU divides by the device's dense bf16 peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_vit import (  # noqa: E402
    ROOT,
    device_info,
    header,
    make_jax_step,
    record,
    results_table,
    row,
    run_and_time,
    time_steps,
    transformer_flops,
)


def _mlp_matmul_params(model) -> int:
    from gradflow.nets._inrank import InRankLinear, LowRankLinear

    total = 0
    for name in ("fc_in", "fc_out"):
        lin = getattr(model.blocks.mlp, name)
        if isinstance(lin, InRankLinear):
            total += lin.w0.size + lin.u.size + lin.v.size
        elif isinstance(lin, LowRankLinear):
            total += lin.u.size + lin.v.size
        else:
            total += lin.weight.size
    return total


def gpt_flops(model, batch: int) -> float:
    c = model.config
    p = c.n_layers * 4 * c.d_emb * c.n_heads * c.d_head + _mlp_matmul_params(model) + c.vocab_size * c.d_emb
    return batch * transformer_flops(p_matmul=p, tokens=c.context, n_layers=c.n_layers, n_heads=c.n_heads,
                                     d_head=c.d_head)


def bench_jax(name, model, batch: int, steps: int, warmup: int, dtype) -> dict:
    from gradflow.nets._inrank import _lm_loss, _trainable

    c = model.config
    stream = jax.random.randint(jax.random.PRNGKey(1), (batch * c.context + 1,), 0, c.vocab_size, jnp.int32)
    idx = jnp.arange(batch, dtype=jnp.int32)
    step, state = make_jax_step(lambda m, b: _lm_loss(m, (b, c.context), idx, dtype), model, dtype,
                                trainable=_trainable(model))
    sec, mem = run_and_time(step, stream, state, steps, warmup)
    return row(f"JAX {name} ({jnp.dtype(dtype).name})", sec, batch * c.context, gpt_flops(model, batch),
               device_info()[1], mem)


def bench_torch(cfg, batch: int, steps: int, warmup: int) -> dict | None:
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    hf = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.context, n_embd=cfg.d_emb, n_layer=cfg.n_layers,
                    n_head=cfg.n_heads, n_inner=cfg.d_mlp, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hf).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.context), device=dev)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32

    def run():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=dtype, enabled=dev == "cuda"):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        if dev == "cuda":
            torch.cuda.synchronize()

    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sec = time_steps(run, steps, warmup)
    mem = torch.cuda.max_memory_allocated() if dev == "cuda" else None
    p = cfg.n_layers * (4 * cfg.d_emb * cfg.d_emb + 2 * cfg.d_emb * cfg.d_mlp) + cfg.vocab_size * cfg.d_emb
    flops = batch * transformer_flops(p_matmul=p, tokens=cfg.context, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                                      d_head=cfg.d_emb // cfg.n_heads)
    return row("PyTorch HF GPT2LMHeadModel", sec, batch * cfg.context, flops, device_info()[1], mem)


def main(argv=None) -> str:
    from gradflow.nets._configs import gpt_config
    from gradflow.nets._gpt import GPT
    from gradflow.nets._inrank import InRankConfig, to_inrank, to_low_rank

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="gpt2-small", help="GPT config: gpt2-small, gpt2-medium, gpt2-large, gpt2-tiny")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per step (default 16; 4 for gpt2-tiny)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    p.add_argument("--rank", type=int, default=None, help="InRank-Efficient rank (default 256; 4 for gpt2-tiny)")
    p.add_argument("--buffer", type=int, default=None, help="InRank buffer b (default 100; 4 for gpt2-tiny)")
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                   help="compute dtype (auto: bf16 on GPU/TPU, float32 on CPU)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    p.add_argument("--remat", action=argparse.BooleanOptionalAction, default=None,
                   help="recompute block activations in the backward pass (default: the config's; on for gpt2-small+)")
    p.add_argument("--record", nargs="?", const=str(ROOT / "docs" / "benchmarks.md"), default=None,
                   help="append the table to docs/benchmarks.md (or the given file)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    tiny = args.config in ("gpt2-tiny", "tiny")
    cfg = gpt_config("gpt2-tiny" if tiny else args.config)
    if args.remat is not None:
        cfg = dataclasses.replace(cfg, remat=args.remat)
    batch = args.batch_size or (4 if tiny else 16)
    rank = args.rank or (4 if tiny else 256)
    buffer = args.buffer or (4 if tiny else 100)
    dtype = (jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16) if args.dtype == "auto" else jnp.dtype(args.dtype)

    model = GPT(cfg, key=jax.random.PRNGKey(0))
    rows = [bench_jax("full rank", model, batch, args.steps, args.warmup, dtype)]
    zeros = {n: jnp.zeros_like(getattr(model.blocks.mlp, n).weight) for n in ("fc_in", "fc_out")}
    inrank = to_inrank(model, zeros, config=InRankConfig(buffer=buffer, eps=0.0))
    R = inrank.blocks.mlp.fc_in.u.shape[-1]
    rows.append(bench_jax(f"InRank phase (R = {R} masked + W_0)", inrank, batch, args.steps, args.warmup, dtype))
    low = to_low_rank(inrank, ranks={n: [rank] * cfg.n_layers for n in ("fc_in", "fc_out")})
    del inrank
    rows.append(bench_jax(f"InRank-Efficient (rank {rank})", low, batch, args.steps, args.warmup, dtype))
    if not args.no_torch:
        torch_row = bench_torch(cfg, batch, args.steps, args.warmup)
        rows += [torch_row] if torch_row else []
    note = "" if len(rows) > 3 or args.no_torch else "\nPyTorch/transformers not installed: no comparison row.\n"
    section = header(f"GPT training throughput: {cfg.n_layers} layers × {cfg.d_emb}, context {cfg.context}, "
                     f"batch {batch}, remat {'on' if cfg.remat else 'off'}", argv) + "\n" + results_table(rows, "tokens/s") + "\n" + note
    print(section)
    if args.record:
        record(section, args.record)
    return section


if __name__ == "__main__":
    main()
