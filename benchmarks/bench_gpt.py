"""Training throughput of GPT-2: tokens/s, MFU, step memory; full rank vs InRank vs InRank-Efficient, with and
without remat; PyTorch (Hugging Face) alongside.

    python benchmarks/bench_gpt.py                       # GPT-2 small, context 1024, batch 16, remat on and off
    python benchmarks/bench_gpt.py --config gpt2-tiny    # seconds on CPU
    python benchmarks/bench_gpt.py --remat on --record   # remat on only; append a section to docs/benchmarks.md

The JAX rows time gradflow's training step (that of ``nets.train`` and ``nets.train_inrank``) with the InRank
paper's optimiser (recipe ``gpt2-wikitext103``: AdamW, weight decay 0.1, clipping at 1) on synthetic tokens:

- full rank: every weight trained;
- InRank phase: MLP matrices ``W_0 + U diag(m) V``, ``U, V`` allocated at R columns (masked), ``W_0`` frozen;
- InRank-Efficient after the switch: MLP matrices ``U* V*`` of fixed rank ``--rank`` (default 256, about the
  paper's 254 = 33 % of 768 for GPT-2 small);

each with ``remat`` on, off or both (``--remat``): recomputing the block activations in the backward pass trades
time for memory, and the rows show both. PyTorch (when ``torch`` and ``transformers`` import): Hugging Face
``GPT2LMHeadModel`` of the same shape (no dropout, its default attention kernel), AdamW with the same settings and
clipping, no gradient checkpointing.

FLOPs per sequence of ``T = context`` tokens (see ``_common``), with the MLP weights as parameterised in the row:

    6·(L·4·d_emb·H·d_head + P_mlp + V·d_emb)·T + 4·P_W0·T + 12·L·H·T²·d_head

(``P_mlp``: dense ``2·L·d_emb·d_mlp``, or the factors ``U, V`` at their allocated width; ``P_W0``: InRank's
frozen ``W_0``, 0 otherwise; ``V·d_emb``: the tied LM head).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

_MLP = ("fc_in", "fc_out")


def gpt_flops(model, batch: int) -> float:
    """Training FLOPs of ``batch`` sequences (module docstring)."""
    from gradflow.nets import InRankLinear, LowRankLinear

    c = model.config
    trained, frozen = c.n_layers * 4 * c.d_emb * c.n_heads * c.d_head + c.vocab_size * c.d_emb, 0
    for name in _MLP:
        lin = getattr(model.blocks.mlp, name)
        if isinstance(lin, (InRankLinear, LowRankLinear)):
            trained += lin.u.size + lin.v.size
            frozen += lin.w0.size if isinstance(lin, InRankLinear) else 0
        else:
            trained += lin.weight.size
    return batch * (
        C.matmul_flops(trained, c.context)
        + C.matmul_flops(frozen, c.context, trained=False)
        + C.attention_flops(tokens=c.context, n_layers=c.n_layers, n_heads=c.n_heads, d_head=c.d_head)
    )


def jax_rows(cfg, recipe, dtype, args) -> list[dict]:
    """Full rank, InRank phase and InRank-Efficient for ``cfg`` (its ``remat`` included)."""
    from gradflow.nets import GPT, InRankConfig, to_inrank, to_low_rank
    from gradflow.nets._inrank import trainable

    b, tiny = recipe.batch_size, args.config == "gpt2-tiny"
    stream = jax.random.randint(jax.random.PRNGKey(1), (b * cfg.context + 1,), 0, cfg.vocab_size, jnp.int32)
    remat = f"remat {'on' if cfg.remat else 'off'}, attention {cfg.attention}"

    def bench(name, model):
        return C.bench_jax(
            f"{name}, {remat}",
            model,
            stream,
            kind="token",
            config=recipe,
            dtype=dtype,
            trainable=trainable(model),
            items_per_step=b * cfg.context,
            flops=gpt_flops(model, b),
            n_steps=args.steps,
            n_warmup=args.warmup,
        )

    model = GPT(cfg, key=jax.random.key(0))
    rows = [bench("GPT full rank", model)]
    zeros = {n: jnp.zeros_like(getattr(model.blocks.mlp, n).weight) for n in _MLP}
    inrank = to_inrank(model, zeros, config=InRankConfig(buffer=args.buffer or (4 if tiny else 100), eps=0.0))
    rows.append(bench(f"InRank phase (R = {inrank.blocks.mlp.fc_in.u.shape[-1]} masked + W_0)", inrank))
    rank = args.rank or (4 if tiny else 256)
    low = to_low_rank(inrank, ranks={n: [rank] * cfg.n_layers for n in _MLP})
    rows.append(bench(f"InRank-Efficient (rank {rank})", low))
    return rows


def bench_torch(cfg, recipe, args) -> dict:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    def build():
        return GPT2LMHeadModel(
            GPT2Config(
                vocab_size=cfg.vocab_size,
                n_positions=cfg.context,
                n_embd=cfg.d_emb,
                n_layer=cfg.n_layers,
                n_head=cfg.n_heads,
                n_inner=cfg.d_mlp,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
            )
        )

    b = recipe.batch_size
    tokens = torch.randint(0, cfg.vocab_size, (b, cfg.context))
    d_head = cfg.d_emb // cfg.n_heads
    p = cfg.n_layers * (4 * cfg.d_emb * cfg.d_emb + 2 * cfg.d_emb * cfg.d_mlp) + cfg.vocab_size * cfg.d_emb
    flops = b * C.transformer_flops(
        p_matmul=p, tokens=cfg.context, n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_head=d_head
    )
    return C.bench_torch(
        "HF GPT2LMHeadModel",
        build,
        (tokens,),
        lambda m, x: m(input_ids=x[0], labels=x[0]).loss,
        lambda params, fused: torch.optim.AdamW(
            params,
            lr=recipe.lr,
            betas=(recipe.b1, recipe.b2),
            eps=recipe.eps,
            weight_decay=recipe.weight_decay,
            fused=fused,
        ),
        n_steps=args.steps,
        n_warmup=args.warmup,
        items_per_step=b * cfg.context,
        flops=flops,
        clip=recipe.grad_clip,
    )


def main(argv=None) -> str:
    from gradflow.nets import gpt_config, train_config

    argv = sys.argv[1:] if argv is None else list(argv)
    p = C.parser(
        __doc__, config="gpt2-small", configs="gpt2-small, gpt2-medium, gpt2-large, gpt2-tiny", steps=10, warmup=2
    )
    p.add_argument(
        "--remat",
        choices=("on", "off", "both"),
        default="both",
        help="recompute block activations in the backward pass: on, off, or both side by side",
    )
    p.add_argument("--rank", type=int, default=None, help="InRank-Efficient rank (default 256; 4 for gpt2-tiny)")
    p.add_argument("--buffer", type=int, default=None, help="InRank buffer b (default 100; 4 for gpt2-tiny)")
    args = p.parse_args(argv)
    cfg = gpt_config(args.config)
    batch = args.batch_size or (4 if args.config == "gpt2-tiny" else 16)
    recipe = dataclasses.replace(train_config("gpt2-wikitext103"), batch_size=batch, micro_batch=None)
    if cfg.d_emb != cfg.n_heads * cfg.d_head and not args.no_torch:
        raise ValueError("the PyTorch row needs d_emb = n_heads · d_head; use --no-torch")
    notes, torch_rows = [], []
    if not args.no_torch:  # PyTorch first, before JAX holds GPU memory
        missing = C.torch_missing("transformers")
        torch_rows = [] if missing else [bench_torch(cfg, recipe, args)]
        notes += [missing] if missing else []
    dtype = C.compute_dtype(args.dtype)
    rows = [
        r
        for remat in {"on": (True,), "off": (False,), "both": (True, False)}[args.remat]
        for attention in C.attention_modes(args.attention)
        for r in jax_rows(dataclasses.replace(cfg, remat=remat, attention=attention), recipe, dtype, args)
    ]
    title = (
        f"GPT training throughput: {cfg.n_layers} layers × {cfg.d_emb}, context {cfg.context}, batch {batch}, "
        f"remat {args.remat}"
    )
    return C.finish(args, argv, title, rows + torch_rows, "tokens/s", notes)


if __name__ == "__main__":
    main()
