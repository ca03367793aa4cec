"""The ``gradflow`` command line: ``demo``, ``flow``, ``greedy``, ``compare``, ``sweep`` (and the networks' ``vit``, ``gpt``, ...).

Usage::

    gradflow demo --out demo_output                      # the paper's toy task, Figures 6–10, report
    gradflow flow --model diagonal_linear --p 8 --alpha 1e-2 1e-8 --out flow_output
    gradflow greedy --model diagonal_attention --dim 10 --out greedy_output
    gradflow compare --model diagonal_linear --log-alpha -10 -100 -1000 --out compare_output
    gradflow compare --model attention_full --alpha 1e-4 1e-16 --out compare_output   # full weights W = U Vᵀ
    gradflow demo --full-weights --out demo_output       # Figure 2 d–f exactly, into demo_output/full_weights
    gradflow demo --full-weights --paper-size            # ... at the paper's size, into demo_output/full_weights_paper
    gradflow sweep sweep.toml --out sweep_output            # a grid of tasks × seeds × α (see docs: Scaling out)

Bad input exits with status 2 and a one-line ``gradflow: error: ...`` message, before anything is computed; an output
folder that holds another run's output is refused unless ``--overwrite`` is given.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from .._config import deferred_interrupts
from .._startup import started
from . import _commands
from ._options import CLIError, Parser, add_model_options, add_out, positive_int
from ._sweep import add_sweep

_OWN = ("demo", "flow", "greedy", "compare", "sweep")


def build_parser(*, networks: bool = True) -> argparse.ArgumentParser:
    """The argument parser; ``networks=False`` leaves out the networks' subcommands (and their imports)."""
    parser = Parser(
        prog="gradflow",
        description="Incremental learning with diagonal weights: the exact rescaled gradient flow, "
        "its greedy limit (Algorithm 1 of 'Transformers learn through gradual rank increase') "
        "and their comparison.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demos = _commands.demos()  # every family's gradflow demo, from the registry
    default = next(d for d in demos.values() if d.flag is None)
    p = sub.add_parser("demo", help=default.help)
    folders = [f for d in demos.values() for f in (d.folder, d.paper_folder) if f]
    add_out(p, "demo_output", "results", "figures", *folders)
    p.add_argument("--force", action="store_true", help="recompute everything (default: reuse finished parts)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    papers = " or ".join(d.flag for d in demos.values() if "paper_size" in d.configs)
    size.add_argument("--paper-size", action="store_true", help=f"with {papers}: the paper's size")
    for demo in demos.values():
        if demo.flag is not None:
            p.add_argument(demo.flag, action="store_true", help=demo.help)
    p.set_defaults(func=_commands.demo)

    p = sub.add_parser("flow", help="the exact rescaled gradient flow at one or several α")
    add_model_options(p, tau_default="5 / max_i |g_i(0)| or 5 / max_j σ_1(G_j(0)), five times the first stage time")
    add_out(p, "flow_output", "results", "figures")
    p.set_defaults(func=_commands.flow)

    p = sub.add_parser("greedy", help="the greedy limit (Algorithm 1) with its assumption checks")
    add_model_options(p, alphas=False)
    p.add_argument("--max-stages", type=positive_int, help="stop after this many stages")
    add_out(p, "greedy_output")
    p.set_defaults(func=_commands.greedy)

    p = sub.add_parser("compare", help="flows at several α against the greedy limit: tables, figures, report")
    add_model_options(p, tau_default="1.25 × the last greedy stage time")
    p.add_argument("--max-stages", type=positive_int, help="stop the greedy path after this many stages")
    p.add_argument("--perturb", action="store_true", help="also run the perturb-and-continue checks (Figures 9–10)")
    add_out(p, "compare_output", "results", "figures")
    p.add_argument("--force", action="store_true", help="recompute everything (default: reuse finished parts)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_commands.compare)

    add_sweep(sub)
    if networks:
        from ..nets._cli import add_subcommands

        add_subcommands(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"gradflow: {category.__name__}: {message}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    """Run the ``gradflow`` command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(networks=first not in _OWN)
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a bad option (one line on stderr)
        return int(stop.code or 0)
    started()  # Ctrl-C from here on: the command's own handling (finished parts kept)
    try:
        with warnings.catch_warnings(), deferred_interrupts():  # Ctrl-C stops at the next check, never inside JAX
            warnings.showwarning = _show_warning
            status = args.func(args)
    except (CLIError, ValueError, OSError, RuntimeError) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"gradflow: error: {message}", file=sys.stderr)
        return 1 if isinstance(err, RuntimeError) else 2
    except KeyboardInterrupt:
        print("gradflow: interrupted (finished parts are kept; re-run to resume)", file=sys.stderr)
        return 130
    return int(status or 0)
