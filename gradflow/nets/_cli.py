"""The networks' commands: ``gradflow vit`` and ``gradflow gpt`` train at one or several initialisation scales,
record the attention spectra, draw the paper's figures and write a short report; ``gradflow toy-attention`` runs
the attention head with full weights; ``gradflow inrank`` trains full rank against InRank
(``_inrank_train.compare_inrank``). vit, gpt and inrank train on one or several devices and processes.

Every command writes one run folder per scale (or mode) and never overwrites an earlier run's: with such a folder in
``--out`` it needs ``--resume`` (continue) or ``--overwrite`` (start again). A non-finite loss ends it with a one-line
error (exit status 2), Ctrl-C with a line that says how to resume (130); what has finished stays on disk."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from .._cli._options import output_folder
from . import _plots, _runs
from ._configs import (
    ATTENTION_IMPLEMENTATIONS,
    GPT_CONFIGS,
    TRAIN_CONFIGS,
    VIT_CONFIGS,
    check_init_scale,
    gpt_config,
    train_config,
    vit_config,
)
from ._distributed import SHARDINGS, is_writer
from ._step import NonFiniteLossError
from ._toy_attention import ToyAttentionConfig, plot_toy_attention, train_toy_attention
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


# ----------------------------------------------------------------------------- options shared by the commands


def init_scale_type(*, below_one: bool = False):
    """The argparse ``type`` of ``--init-scale``: a number that ``_configs.check_init_scale`` accepts."""

    def parse(text: str) -> float:
        try:
            return check_init_scale(float(text), below_one=below_one)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


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


def _add_run_options(p: argparse.ArgumentParser, out: str) -> None:
    """``--out``, ``--seed`` and what to do with an earlier run in ``--out``: ``--resume`` or ``--overwrite``."""
    p.add_argument("--out", type=output_folder("figures"), default=out, help=f"output folder (default {out})")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, its order and the initialisation (default 0)")
    earlier = p.add_mutually_exclusive_group()
    earlier.add_argument(
        "--resume",
        action="store_true",
        help="continue the runs found in --out from their checkpoints (finished runs are reloaded; a longer run "
        "length lengthens them)",
    )
    earlier.add_argument("--overwrite", action="store_true", help="start the runs found in --out again, from step 0")


def _add_training_options(p: argparse.ArgumentParser, *, recipe_help: str, data_help: str) -> None:
    """The recipe and data options of ``vit``, ``gpt`` and ``inrank``."""
    p.add_argument("--train-config", default=None, help=f"recipe: one of {', '.join(TRAIN_CONFIGS)} ({recipe_help})")
    p.add_argument("--data-dir", default=None, help=data_help)
    p.add_argument("--batch-size", type=int, default=None, help="override the recipe's global batch size")
    p.add_argument("--lr", type=float, default=None, help="override the recipe's peak learning rate")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default: the recipe's)")
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
        help="recompute the block activations in the backward pass, to save memory (default: the config's: on "
        "for gpt2-small/medium/large)",
    )
    p.add_argument(
        "--attention",
        choices=ATTENTION_IMPLEMENTATIONS,
        default="auto",
        help="attention kernel (auto: cuDNN's fused flash attention on a GPU in bf16 where cuDNN accepts the "
        "shapes, else XLA); the same function, so a run may resume under another",
    )


def _command(run):
    """A networks command that ends a non-finite loss with a one-line error (exit status 2) and Ctrl-C with a line
    that says how to resume (130)."""

    @functools.wraps(run)
    def command(args) -> int:
        try:
            run(args)
        except NonFiniteLossError as err:
            print(f"gradflow: error: {err}; start again with --overwrite (or another --out)", file=sys.stderr)
            return 2
        except KeyboardInterrupt as err:
            message = str(err) or "interrupted; the checkpoints written so far are kept: continue with --resume"
            print(f"gradflow: {message}", file=sys.stderr)
            return 130
        return 0

    return command


def _refuse_overwrites(args, folders) -> None:
    """Refuse at once, before any training, if a run folder holds an earlier run (``_runs.refuse_overwrite``)."""
    for folder in folders:
        _runs.refuse_overwrite(folder, resume=args.resume, overwrite=args.overwrite)


def add_subcommands(subparsers) -> None:
    """Register ``vit``, ``gpt``, ``toy-attention`` and ``inrank`` on an ``argparse`` sub-parsers object."""
    for name, configs, default, data, help_ in (
        ("vit", VIT_CONFIGS, "tiny", "CIFAR-10/100 or image-folder root", "train a ViT"),
        ("gpt", GPT_CONFIGS, "gpt2-tiny", "WikiText folder", "train a GPT-2"),
    ):
        p = subparsers.add_parser(name, help=f"{help_} and track the spectra of its attention perturbations")
        p.add_argument("--config", default=default, help=f"model: one of {', '.join(configs)} (default {default})")
        _add_training_options(
            p, recipe_help="default: the model's paper recipe", data_help=f"{data}; absent: the embedded default data"
        )
        p.add_argument(
            "--init-scale",
            type=init_scale_type(),
            nargs="+",
            default=[1.0],
            help="one or several initialisation scales (positive); several draw the comparison figures",
        )
        length = p.add_mutually_exclusive_group()
        length.add_argument("--steps", type=int, default=None, help="train for this many optimiser steps")
        length.add_argument("--epochs", type=int, default=None, help="train for this many epochs")
        p.add_argument("--micro-batch", type=int, help="micro-batch of gradient accumulation (default: the recipe's)")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        _add_run_options(p, f"{name}_output")
        add_device_options(p)
        p.set_defaults(func=_command(_run_networks), model_kind=name)
    _add_toy_attention(subparsers)
    _add_inrank(subparsers)


# ----------------------------------------------------------------------------- vit and gpt


def _recipe(args):
    recipe = train_config(args.train_config or _DEFAULT_RECIPE.get(args.config, "tiny"))
    return recipe.with_overrides(
        batch_size=args.batch_size,
        micro_batch=getattr(args, "micro_batch", None),
        lr=args.lr,
        checkpoint_every=args.checkpoint_every,
        steps=args.steps,
        epochs=getattr(args, "epochs", None),
        sharding=args.sharding,
    )


def _model_and_data(args):
    """``(model config, data, build)``: the config fitted to the data, ``build(scale)`` the model at that scale."""
    from . import _data
    from ._gpt import GPT
    from ._vit import ViT

    kernels = {"attention": args.attention} | ({} if args.remat is None else {"remat": args.remat})
    if args.model_kind == "vit":
        cfg = vit_config(args.config)
        data = _data.load_images(args.data_dir, image_size=cfg.image_size, seed=args.seed)
        h, w, c = data.image_shape
        if h != w:
            raise ValueError(f"the ViT needs square images, got {h}x{w}")
        cfg = dataclasses.replace(cfg, image_size=h, channels=c, n_classes=data.num_classes, **kernels)
        return cfg, data, lambda scale: ViT(cfg, key=jax.random.key(args.seed), init_scale=scale)
    cfg = gpt_config(args.config)
    data = _data.load_text(args.data_dir)
    cfg = dataclasses.replace(cfg, vocab_size=data.vocab_size, **kernels)
    return cfg, data, lambda scale: GPT(cfg, key=jax.random.key(args.seed), init_scale=scale)


def _run_networks(args) -> None:
    start_processes(args)
    out = pathlib.Path(args.out)
    runs = {scale: out / f"scale_{scale:g}" for scale in args.init_scale}
    _refuse_overwrites(args, runs.values())
    model_cfg, data, build = _model_and_data(args)
    recipe = _recipe(args)
    results, histories, seconds = {}, {}, {}
    for scale, run in runs.items():
        print(f"init scale {scale:g} → {run}")
        t0 = time.perf_counter()
        results[scale] = train(
            build(scale),
            recipe,
            data,
            seed=args.seed,
            out=run,
            resume=args.resume,
            overwrite=args.overwrite,
            compute_dtype=_compute_dtype(args),
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


# ----------------------------------------------------------------------------- toy-attention


def _add_toy_attention(subparsers) -> None:
    """Register ``toy-attention``: the attention head with full weights, GD from small initialisation."""
    p = subparsers.add_parser(
        "toy-attention", help="one attention head with full weights from small init (paper Fig. 2 d-f)"
    )
    p.add_argument(
        "--init-scale",
        type=init_scale_type(below_one=True),
        nargs="+",
        default=[1e-2, 1e-4],
        help="one or several α in (0, 1)",
    )
    p.add_argument("--steps", type=int, default=20000, help="gradient-descent steps (default 20000)")
    p.add_argument("--lr", type=float, default=2e-3, help="step size (default 2e-3)")
    p.add_argument("--record-every", type=int, default=50, help="steps between records (default 50)")
    p.add_argument("--n", type=int, default=1000, help="samples (default 1000)")
    p.add_argument("--tokens", type=int, default=10, help="tokens per sample (default 10)")
    p.add_argument("--dim", type=int, default=50, help="token dimension (default 50)")
    _add_run_options(p, "toy_attention_output")
    p.set_defaults(func=_command(_run_toy_attention))


def _run_toy_attention(args) -> None:
    config = ToyAttentionConfig(n=args.n, tokens=args.tokens, dim=args.dim)
    out = pathlib.Path(args.out)
    runs = {alpha: out / f"alpha_{alpha:g}" for alpha in args.init_scale}
    _refuse_overwrites(args, runs.values())
    results = []
    for alpha, run in runs.items():
        options = dict(seed=args.seed, record_every=args.record_every, resume=args.resume, overwrite=args.overwrite)
        r = train_toy_attention(config, init_scale=alpha, steps=args.steps, lr=args.lr, out=run, **options)
        print(
            f"α={alpha:g}: final loss {r.loss[-1]:.4g}; top singular values "
            f"VO {np.round(r.sv_vo[-1, :4], 3).tolist()}, KQ {np.round(r.sv_kq[-1, :4], 3).tolist()}"
        )
        results.append(r)
    plot_toy_attention(results, out / "toy_attention.png")
    print(f"figure: {out / 'toy_attention.png'}")


# ----------------------------------------------------------------------------- inrank


def _add_inrank(subparsers) -> None:
    """Register ``inrank``: train a GPT in full rank, InRank and/or InRank-Efficient and compare."""
    from ._inrank_train import MODES

    p = subparsers.add_parser("inrank", help="InRank / InRank-Efficient vs full-rank GPT-2 training (paper 004)")
    p.add_argument("--config", default="gpt2-tiny", help="GPT config (gpt2-tiny, gpt2-small, ...)")
    _add_training_options(
        p,
        recipe_help="default: tiny for gpt2-tiny, else gpt2-wikitext103",
        data_help="WikiText-103/2 raw folder (absent: the embedded English corpus)",
    )
    p.add_argument("--modes", nargs="+", choices=MODES, default=["full", "inrank-efficient"])
    p.add_argument("--steps", type=int, default=None, help="train for this many optimiser steps")
    p.add_argument("--init-rank", type=int, default=2)
    p.add_argument(
        "--buffer",
        type=int,
        default=None,
        help="b (default: the paper's 100, or as many as fit beside --init-rank in --max-rank: 14 for gpt2-tiny)",
    )
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--check-every", type=int, default=10)
    p.add_argument("--eps", type=float, default=1e-3)
    p.add_argument("--max-rank", type=int, default=None)
    p.add_argument(
        "--efficient-after", type=int, default=None, help="InRank steps before fixing the rank (default 1 epoch)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_run_options(p, "inrank_output")
    add_device_options(p)
    p.set_defaults(func=_command(_run_inrank), model_kind="gpt")


def _inrank_config(args):
    """The InRank options, checked against the GPT's MLP matrices (``d_emb × d_mlp``) before any data is read;
    ``--buffer``'s default is the paper's b = 100, or the columns R that ``--max-rank`` (default half the smaller
    side) leaves beside ``--init-rank`` where fewer (a small GPT's matrices cannot hold 100)."""
    from ._inrank import InRankConfig

    fields = ("init_rank", "threshold", "check_every", "eps", "max_rank", "efficient_after")
    inrank = InRankConfig(buffer=1, **{f: getattr(args, f) for f in fields})
    cfg = gpt_config(args.config)
    fits = max(1, min(100, inrank.columns(cfg.d_emb, cfg.d_mlp) - args.init_rank))
    inrank = dataclasses.replace(inrank, buffer=fits if args.buffer is None else args.buffer)
    inrank.allocation(cfg.d_emb, cfg.d_mlp)
    return inrank


def _run_inrank(args) -> None:
    from ._inrank_train import compare_inrank, comparison_table

    start_processes(args)
    out = pathlib.Path(args.out)
    inrank = _inrank_config(args)
    _refuse_overwrites(args, [out / mode for mode in args.modes])
    _, data, build = _model_and_data(args)
    options = dict(seed=args.seed, resume=args.resume, overwrite=args.overwrite, devices=args.devices)
    options["progress"] = not args.no_progress and is_writer()
    recipe, dtype = _recipe(args), _compute_dtype(args)
    rows = compare_inrank(
        lambda: build(1.0),
        recipe,
        data,
        modes=tuple(args.modes),
        inrank=inrank,
        out=out,
        compute_dtype=dtype,
        **options,
    )
    if not is_writer():
        return
    print(comparison_table(rows, data))
    for mode in rows:
        records = out / mode / "ranks.jsonl"
        if records.exists() and records.stat().st_size:
            title = f"{mode}, {args.config}"
            figure = _plots.plot_inrank_ranks(
                records, out / "figures" / f"ranks_{mode}.png", until=rows[mode]["steps"], title=title
            )
            print(f"ranks through training: {figure}")
