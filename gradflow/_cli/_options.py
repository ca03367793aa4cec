"""The command line's options: numbers checked as argparse reads them, and the built-in model's options."""

from __future__ import annotations

import argparse
import math

from .. import models
from .._checks import check_int, check_scales
from .._demo import PAPER_ALPHAS


class CLIError(Exception):
    """Bad command-line input (reported on one line, exit status 2)."""


def _number(convert, check, expected: str):
    """An argparse ``type`` that converts with ``convert`` and validates with ``check`` (which raises ValueError)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        try:
            check(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return value

    return parse


def _positive(x: float) -> None:
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"expected a positive number, got {x!r}")


def _non_negative(x: float) -> None:
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"expected a non-negative number, got {x!r}")


positive_int = _number(int, lambda x: check_int(x, "the value"), "a positive integer")
alpha_type = _number(float, lambda x: check_scales(x, None, names=("alpha", "--log-alpha")), "a number in (0, 1)")
log_alpha_type = _number(float, lambda x: check_scales(None, x, names=("--alpha", "log alpha")), "a negative number")
positive_float = _number(float, _positive, "a positive number")
non_negative_float = _number(float, _non_negative, "a non-negative number")


def add_model_options(p: argparse.ArgumentParser, *, alphas: bool = True, tau_default: str = "") -> None:
    p.add_argument(
        "--model",
        choices=sorted(models.BUILTIN) + sorted(models.FACTORIZED),
        default="diagonal_attention",
        help="built-in task (default: diagonal_attention, the paper's toy task); matrix_factorization, "
        "matrix_sensing and attention_full have full weights W = U Vᵀ",
    )
    sizes = p.add_argument_group("model sizes (each model takes its own; defaults are the model's)")
    sizes.add_argument("--n", type=positive_int, help="samples (matrix_factorization, matrix_sensing: columns of W)")
    sizes.add_argument("--m", type=positive_int, help="rows of W (matrix_factorization, matrix_sensing)")
    sizes.add_argument("--measurements", type=positive_int, help="measurements (matrix_sensing)")
    sizes.add_argument("--p", type=positive_int, help="coordinates (diagonal_linear)")
    sizes.add_argument("--tokens", type=positive_int, help="tokens per sample (attention, transformer)")
    sizes.add_argument("--dim", type=positive_int, help="token dimension (attention, transformer)")
    sizes.add_argument("--layers", type=positive_int, help="layers (diagonal_transformer)")
    sizes.add_argument("--heads", type=positive_int, help="heads per layer (diagonal_transformer)")
    p.add_argument("--seed", type=int, default=0, help="data, teacher and initialisation seed (default 0)")
    if alphas:
        group = p.add_mutually_exclusive_group()
        group.add_argument(
            "--alpha",
            type=alpha_type,
            nargs="+",
            metavar="A",
            help="initialisation scales in (0, 1) (default: the paper's 0.1 ... 1e-32)",
        )
        group.add_argument(
            "--log-alpha",
            type=log_alpha_type,
            nargs="+",
            metavar="L",
            help="natural logs of the scales (e.g. -10000 for α far below float64's range)",
        )
        p.add_argument("--tau-max", type=positive_float, help=f"last rescaled time (default: {tau_default})")
        p.add_argument("--num-times", type=positive_int, default=500, help="recorded times (default 500)")
        p.add_argument(
            "--atol",
            type=positive_float,
            default=1e-8,
            help="flow tolerance: local error of log w per step (default 1e-8)",
        )
        p.add_argument(
            "--rtol", type=non_negative_float, default=0.0, help="flow tolerance relative to |log w| (default 0)"
        )


def model_options(args) -> tuple[tuple[str, object], ...]:
    """The size options given for ``--model`` (an error for one it does not take) and its seed."""
    allowed = models.builtin(args.model).sizes
    registry = [*models.BUILTIN.values(), *models.FACTORIZED.values()]
    sizes = dict.fromkeys(k for entry in registry for k in entry.sizes)  # every size option, in order
    given = [k for k in sizes if getattr(args, k) is not None]
    bad = [k for k in given if k not in allowed]
    if bad:
        takes = " ".join(f"--{k}" for k in allowed)
        raise CLIError(f"--{bad[0]} does not apply to {args.model} (it takes {takes} --seed)")
    return tuple((k, getattr(args, k)) for k in given) + (("seed", args.seed),)


def log_alphas(args) -> tuple[float, ...]:
    if args.log_alpha is not None:
        return tuple(args.log_alpha)
    return tuple(math.log(a) for a in (args.alpha or PAPER_ALPHAS))
