"""Training throughput of the paper ViT: images/s, MFU, step memory; PyTorch (timm) alongside.

    python benchmarks/bench_vit.py                       # paper ViT (32×32, patch 4), batch 512, bf16 on GPU
    python benchmarks/bench_vit.py --config tiny         # seconds on CPU
    python benchmarks/bench_vit.py --record              # also append a section to docs/benchmarks.md

The JAX row times ``nets.train``'s own step (Adam, the paper's recipe ``vit-cifar``) on synthetic uint8 images
already on the device (normalised inside the step, as in training). FLOPs per image (see ``_common``), with
``T = n_patches + 1`` tokens (class token) and ``P_blocks = L·(4·d_emb·H·d_head + 2·d_emb·d_mlp)``:

    6·(P_patch·n_patches + P_blocks·T + P_head·1) + 12·L·H·T²·d_head

PyTorch (when ``torch`` and ``timm`` import): timm's ``VisionTransformer`` with the same width, depth, heads, MLP
width, patch, class token and batch, Adam. The paper's heads are 128 wide, not ``d_emb / heads = 64``: where timm's
``Attention`` has ``attn_head_dim`` (recent timm versions), each block's attention is replaced by one with the
config's head dimension, so both rows run the same architecture; otherwise the row says its head dimension and its
FLOPs are counted from its own shapes.
"""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def vit_flops(cfg, d_head: int) -> float:
    """Training FLOPs of one image (module docstring)."""
    tokens = cfg.n_patches + (cfg.pool == "cls")
    p_blocks = cfg.n_layers * (4 * cfg.d_emb * cfg.n_heads * d_head + 2 * cfg.d_emb * cfg.d_mlp)
    return (
        C.matmul_flops(cfg.patch**2 * cfg.channels * cfg.d_emb, cfg.n_patches)
        + C.matmul_flops(p_blocks, tokens)
        + C.matmul_flops(cfg.d_emb * cfg.n_classes, 1)
        + C.attention_flops(tokens=tokens, n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_head=d_head)
    )


def bench_jax(cfg, recipe, dtype, args) -> dict:
    from gradflow.nets import ViT

    b = recipe.batch_size
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.randint(kx, (b, cfg.image_size, cfg.image_size, cfg.channels), 0, 256, jnp.int32).astype(jnp.uint8)
    y = jax.random.randint(ky, (b,), 0, cfg.n_classes, jnp.int32)
    stats = (jnp.zeros(cfg.channels, jnp.float32), jnp.ones(cfg.channels, jnp.float32), jnp.float32(255.0))
    return C.bench_jax(
        f"ViT, attention {cfg.attention}",
        ViT(cfg, key=jax.random.key(0)),
        ((x, y), stats),
        kind="image",
        config=recipe,
        dtype=dtype,
        trainable=eqx.is_inexact_array,
        items_per_step=b,
        flops=b * vit_flops(cfg, cfg.d_head),
        n_steps=args.steps,
        n_warmup=args.warmup,
    )


def bench_torch(cfg, recipe, args) -> dict:
    import torch
    from timm.models.vision_transformer import Attention, VisionTransformer

    matched = "attn_head_dim" in inspect.signature(Attention).parameters
    d_head = cfg.d_head if matched else cfg.d_emb // cfg.n_heads

    def build():
        m = VisionTransformer(
            img_size=cfg.image_size,
            patch_size=cfg.patch,
            in_chans=cfg.channels,
            num_classes=cfg.n_classes,
            embed_dim=cfg.d_emb,
            depth=cfg.n_layers,
            num_heads=cfg.n_heads,
            mlp_ratio=cfg.d_mlp / cfg.d_emb,
            qkv_bias=True,
            class_token=cfg.pool == "cls",
            global_pool="token" if cfg.pool == "cls" else "avg",
        )
        if matched:
            for block in m.blocks:
                block.attn = Attention(cfg.d_emb, num_heads=cfg.n_heads, attn_head_dim=cfg.d_head, qkv_bias=True)
        return m

    b = recipe.batch_size
    batch = (torch.randn(b, cfg.channels, cfg.image_size, cfg.image_size), torch.randint(0, cfg.n_classes, (b,)))
    return C.bench_torch(
        f"timm VisionTransformer, head dim {d_head}",
        build,
        batch,
        lambda m, xy: torch.nn.functional.cross_entropy(m(xy[0]), xy[1]),
        lambda params, fused: torch.optim.Adam(params, lr=recipe.lr, fused=fused),
        n_steps=args.steps,
        n_warmup=args.warmup,
        items_per_step=b,
        flops=b * vit_flops(cfg, d_head),
    )


def main(argv=None) -> str:
    from gradflow.nets import train_config, vit_config

    argv = sys.argv[1:] if argv is None else list(argv)
    args = C.parser(
        __doc__, config="paper", configs="paper (CIFAR size), vit-base-16, tiny", steps=20, warmup=3
    ).parse_args(argv)
    cfg = vit_config(args.config)
    batch = args.batch_size or (8 if args.config == "tiny" else 512)
    recipe = dataclasses.replace(train_config("vit-cifar"), batch_size=batch, micro_batch=None)
    notes, torch_rows = [], []
    if not args.no_torch:  # PyTorch first, before JAX holds GPU memory
        missing = C.torch_missing("timm")
        torch_rows = [] if missing else [bench_torch(cfg, recipe, args)]
        notes += [missing] if missing else []
    dtype = C.compute_dtype(args.dtype)
    rows = [
        bench_jax(dataclasses.replace(cfg, attention=a), recipe, dtype, args) for a in C.attention_modes(args.attention)
    ]
    rows += torch_rows
    return C.finish(args, argv, f"ViT training throughput: {args.config}, batch {batch}", rows, "images/s", notes)


if __name__ == "__main__":
    main()
