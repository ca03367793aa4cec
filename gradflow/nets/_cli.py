"""``gradflow vit`` and ``gradflow gpt``: train at one or several initialisation scales, record the attention
spectra, draw the paper's figures and write a short report; ``gradflow inrank``: full rank against InRank
(``_inrank_train.compare_inrank``). All three train on one or several devices and processes (the device options)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from . import _plots, _runs
from ._configs import GPT_CONFIGS, TRAIN_CONFIGS, VIT_CONFIGS, gpt_config, train_config, vit_config
from ._distributed import SHARDINGS, is_writer
from ._train import default_compute_dtype, train

_DEFAULT_RECIPE = {
    "paper": "vit-cifar",
    "vit-base-16": "vit-imagenet",
    "tiny": "tiny",
    "gpt2-small": "gpt2-wikitext103",
    "gpt2-medium": "gpt2-wikitext103",
    "gpt2-large": "gpt2-wikitext103",
    "gpt2-tiny": "tiny",
}


def add_device_options(p: argparse.ArgumentParser) -> None:
    """``--devices``, ``--sharding`` and the multi-process options (``jax.distributed``)."""
    g = p.add_argument_group("devices and processes")
    g.add_argument(
        "--devices",
        type=int,
        default=None,
        help="train on the first N devices (default: all; every micro-batch is split over them, so N must divide it)",
    )
    g.add_argument(
        "--sharding",
        choices=SHARDINGS,
        default=None,
        help="parameters and optimiser state: a copy on every device (replicated, data parallel) or each large "
        "array split over the devices (fsdp) (default: the recipe's, replicated)",
    )
    g.add_argument(
        "--distributed",
        action="store_true",
        help="one of several processes: start jax.distributed first (under SLURM or Open MPI the processes are "
        "found from the environment; else give the three options below, or JAX_COORDINATOR_ADDRESS)",
    )
    g.add_argument("--coordinator", default=None, help="host:port of process 0 (implies --distributed)")
    g.add_argument("--num-processes", type=int, default=None, help="number of processes (implies --distributed)")
    g.add_argument("--process-id", type=int, default=None, help="this process, 0 .. N-1 (implies --distributed)")


def start_processes(args) -> None:
    """``jax.distributed.initialize`` if the device options ask for several processes (before JAX starts)."""
    options = (args.coordinator, args.num_processes, args.process_id)
    if args.distributed or any(o is not None for o in options):
        jax.distributed.initialize(
            coordinator_address=args.coordinator, num_processes=args.num_processes, process_id=args.process_id
        )


def add_subcommands(subparsers) -> None:
    """Register ``vit``, ``gpt``, ``toy-attention`` and ``inrank`` on an ``argparse`` sub-parsers object."""
    from . import _toy_attention

    for name, configs, default, help_ in (
        ("vit", VIT_CONFIGS, "tiny", "train a ViT and track the spectra of its attention perturbations"),
        ("gpt", GPT_CONFIGS, "gpt2-tiny", "train a GPT-2 and track the spectra of its attention perturbations"),
    ):
        p = subparsers.add_parser(name, help=help_)
        p.add_argument("--config", default=default, help=f"model: one of {', '.join(configs)} (default {default})")
        p.add_argument(
            "--train-config",
            default=None,
            help=f"recipe: one of {', '.join(TRAIN_CONFIGS)} (default: the model's paper recipe)",
        )
        p.add_argument(
            "--init-scale",
            type=float,
            nargs="+",
            default=[1.0],
            help="one or several initialisation scales; several draw the comparison figures",
        )
        p.add_argument(
            "--data-dir",
            default=None,
            help="CIFAR-10/100 or image-folder root (vit), WikiText folder (gpt); absent: the embedded default data",
        )
        p.add_argument("--out", default=f"{name}_output", help="output folder")
        length = p.add_mutually_exclusive_group()
        length.add_argument("--steps", type=int, default=None, help="train for this many optimiser steps")
        length.add_argument("--epochs", type=int, default=None, help="train for this many epochs")
        p.add_argument("--batch-size", type=int, default=None, help="override the recipe's global batch size")
        p.add_argument(
            "--micro-batch",
            type=int,
            default=None,
            help="micro-batch for gradient accumulation (default: the recipe's, if it divides the batch)",
        )
        p.add_argument("--lr", type=float, default=None, help="override the recipe's peak learning rate")
        p.add_argument(
            "--checkpoint-every",
            type=int,
            default=None,
            help="steps between checkpoints (default: the recipe's; always one at the end)",
        )
        p.add_argument(
            "--compute-dtype",
            choices=("auto", "float32", "bfloat16"),
            default="auto",
            help="forward/backward dtype (auto: bfloat16 on GPU, float32 on CPU)",
        )
        p.add_argument(
            "--remat",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="recompute the block activations in the backward pass, to save memory (default: the "
            "config's: on for gpt2-small/medium/large)",
        )
        p.add_argument("--resume", action="store_true", help="continue the runs found in --out")
        p.add_argument("--seed", type=int, default=0, help="initialisation, data split and data order")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        add_device_options(p)
        p.set_defaults(func=_run_cli, model_kind=name)
    _toy_attention.add_subcommand(subparsers)
    _add_inrank(subparsers)


def _recipe(args):
    recipe = train_config(args.train_config or _DEFAULT_RECIPE.get(args.config, "tiny"))
    return recipe.with_overrides(
        batch_size=args.batch_size,
        micro_batch=args.micro_batch,
        lr=args.lr,
        checkpoint_every=args.checkpoint_every,
        steps=args.steps,
        epochs=args.epochs,
        sharding=args.sharding,
    )


def _model_and_data(args):
    from . import _data
    from ._gpt import GPT
    from ._vit import ViT

    remat = {} if args.remat is None else {"remat": args.remat}
    if args.model_kind == "vit":
        cfg = vit_config(args.config)
        data = _data.load_images(args.data_dir, image_size=cfg.image_size, seed=args.seed)
        h, w, c = data.image_shape
        if h != w:
            raise ValueError(f"the ViT needs square images, got {h}x{w}")
        cfg = dataclasses.replace(cfg, image_size=h, channels=c, n_classes=data.num_classes, **remat)
        return cfg, data, lambda scale: ViT(cfg, key=jax.random.key(args.seed), init_scale=scale)
    cfg = gpt_config(args.config)
    data = _data.load_text(args.data_dir)
    cfg = dataclasses.replace(cfg, vocab_size=data.vocab_size, **remat)
    return cfg, data, lambda scale: GPT(cfg, key=jax.random.key(args.seed), init_scale=scale)


def _run_cli(args) -> None:
    start_processes(args)
    out = pathlib.Path(args.out)
    model_cfg, data, build = _model_and_data(args)
    recipe = _recipe(args)
    dtype = _compute_dtype(args)
    results, histories, seconds = {}, {}, {}
    for scale in args.init_scale:
        run = out / f"scale_{scale:g}"
        print(f"init scale {scale:g} → {run}")
        t0 = time.perf_counter()
        results[scale] = train(
            build(scale),
            recipe,
            data,
            seed=args.seed,
            out=run,
            resume=args.resume,
            compute_dtype=dtype,
            progress=not args.no_progress and is_writer(),
            devices=args.devices,
        )
        seconds[scale] = time.perf_counter() - t0
        if not is_writer():
            continue
        histories[scale] = _runs.load_spectra(run / "spectra")
        _plots.plot_normalised_spectra(histories[scale], run / "figures" / "normalised_spectra.png")
        _plots.plot_stable_rank_through_training(
            histories[scale], run / "figures" / "stable_rank_training.png", title=f"init scale {scale:g}"
        )
        print(f"  {_summary(results[scale].evaluation)}; {seconds[scale]:.1f} s")
    if not is_writer():
        return
    figs = out / "figures"
    _plots.plot_singular_value_evolution(histories, figs / "singular_value_evolution.png")
    _plots.plot_stable_rank_by_layer(histories, figs / "stable_rank_by_layer.png")
    _plots.plot_losses({s: r.metrics for s, r in results.items()}, figs / "losses.png")
    report = _report(args, model_cfg, recipe, data, results, histories, seconds)
    (out / "report.md").write_text(report)
    print(f"report: {out / 'report.md'}")


def _devices(args) -> str:
    return f"{args.devices or jax.device_count()} device(s) in {jax.process_count()} process(es)"


def _compute_dtype(args):
    return default_compute_dtype() if args.compute_dtype == "auto" else jnp.dtype(args.compute_dtype)


def _summary(evaluation: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in evaluation.items() if isinstance(v, float))


def _report(args, model_cfg, recipe, data, results, histories, seconds) -> str:
    lines = [
        f"# gradflow {args.model_kind}: {args.config} on {data.name}",
        "",
        f"- backend: {jax.default_backend()} ({_devices(args)}), compute dtype: {_compute_dtype(args).name}, "
        f"seed {args.seed}",
        f"- model: `{json.dumps(dataclasses.asdict(model_cfg))}`",
        f"- recipe: `{json.dumps(dataclasses.asdict(recipe))}`",
        "",
        "| init scale | steps | final evaluation | seconds | stable rank Δ(W_K W_Qᵀ) per layer "
        "(mean over heads) | stable rank Δ(W_V W_Oᵀ) per layer |",
        "|---|---|---|---|---|---|",
    ]
    for scale, r in results.items():
        d = histories[scale].delta
        kq = " ".join(f"{v:.2f}" for v in d.kq_stable_rank[-1].mean(-1))
        vo = " ".join(f"{v:.2f}" for v in d.vo_stable_rank[-1].mean(-1))
        lines.append(f"| {scale:g} | {r.steps} | {_summary(r.evaluation)} | {seconds[scale]:.1f} | {kq} | {vo} |")
    lines += [
        "",
        f"Stable ranks at the last measured step (step {int(np.max([h.steps[-1] for h in histories.values()]))}).",
        "",
        "Figures: `figures/singular_value_evolution.png` (paper Fig. 3), `figures/stable_rank_by_layer.png` "
        "(Fig. 4), `figures/losses.png`; per run `scale_*/figures/normalised_spectra.png` (Figs. 1, 5, 11) "
        "and `scale_*/figures/stable_rank_training.png` (Fig. 12).",
        "",
    ]
    return "\n".join(lines)


def _add_inrank(subparsers) -> None:
    """Register ``inrank``: train a GPT in full rank, InRank and/or InRank-Efficient and compare."""
    from ._inrank_train import MODES

    p = subparsers.add_parser("inrank", help="InRank / InRank-Efficient vs full-rank GPT-2 training (paper 004)")
    p.add_argument("--config", default="gpt2-tiny", help="GPT config (gpt2-tiny, gpt2-small, ...)")
    p.add_argument("--train-config", default=None, help="recipe (default: tiny for gpt2-tiny, else gpt2-wikitext103)")
    p.add_argument("--data-dir", default=None, help="WikiText-103/2 raw folder (absent: the embedded English corpus)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=["full", "inrank-efficient"])
    p.add_argument("--steps", type=int, default=None, help="train for this many optimiser steps")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument(
        "--checkpoint-every", type=int, default=None, help="steps between checkpoints (default: the recipe's)"
    )
    p.add_argument("--init-rank", type=int, default=2)
    p.add_argument("--buffer", type=int, default=100)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--check-every", type=int, default=10)
    p.add_argument("--eps", type=float, default=1e-3)
    p.add_argument("--max-rank", type=int, default=None)
    p.add_argument(
        "--efficient-after", type=int, default=None, help="InRank steps before fixing the rank (default 1 epoch)"
    )
    p.add_argument("--compute-dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    p.add_argument(
        "--remat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="recompute the block activations in the backward pass (default: on for the paper-scale "
        "configs, off for gpt2-tiny)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="inrank_output")
    p.add_argument("--resume", action="store_true", help="continue the runs found in --out")
    add_device_options(p)
    p.set_defaults(func=_run_inrank)


def _run_inrank(args) -> None:
    from ._data import load_text
    from ._gpt import GPT
    from ._inrank import InRankConfig
    from ._inrank_train import compare_inrank, comparison_table

    start_processes(args)

    data = load_text(args.data_dir)
    cfg = dataclasses.replace(gpt_config(args.config), vocab_size=data.vocab_size)
    if args.remat is not None:
        cfg = dataclasses.replace(cfg, remat=args.remat)
    recipe = train_config(args.train_config or ("tiny" if args.config == "gpt2-tiny" else "gpt2-wikitext103"))
    recipe = recipe.with_overrides(
        batch_size=args.batch_size,
        lr=args.lr,
        checkpoint_every=args.checkpoint_every,
        steps=args.steps,
        sharding=args.sharding,
    )
    inrank = InRankConfig(
        init_rank=args.init_rank,
        buffer=args.buffer,
        threshold=args.threshold,
        check_every=args.check_every,
        eps=args.eps,
        max_rank=args.max_rank,
        efficient_after=args.efficient_after,
    )
    dtype = None if args.compute_dtype == "auto" else jnp.dtype(args.compute_dtype)
    out = pathlib.Path(args.out)
    rows = compare_inrank(
        lambda: GPT(cfg, key=jax.random.PRNGKey(args.seed)),
        recipe,
        data,
        modes=tuple(args.modes),
        inrank=inrank,
        seed=args.seed,
        out=out,
        resume=args.resume,
        compute_dtype=dtype,
        devices=args.devices,
    )
    if not is_writer():
        return
    print(comparison_table(rows, data))
    for mode in rows:
        records = out / mode / "ranks.jsonl"
        if records.exists() and records.stat().st_size:
            figure = _plots.plot_inrank_ranks(
                records,
                out / "figures" / f"ranks_{mode}.png",
                until=rows[mode]["steps"],
                title=f"{mode}, {args.config}",
            )
            print(f"ranks through training: {figure}")
