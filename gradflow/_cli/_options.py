"""The command line's parser and options: numbers and output folders checked as argparse reads them (negative numbers
such as ``-1e4`` read as values), and the built-in model's options, those of every registered family."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
from pathlib import Path

from .._kit._checks import PAPER_ALPHAS, check_int, check_scales
from .._kit._task import Task
from .._registry import FAMILIES, TASKS, builtin


class CLIError(Exception):
    """Bad command-line input (reported on one line, exit status 2)."""


NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)
"""What argparse reads as a negative number, not an option: ``-3``, ``-1e4``, ``-1E+4``, ``-.5``, ``-inf``."""


class Parser(argparse.ArgumentParser):
    """An argument parser (its subcommands' too) that reads every negative number as a value, and reports an error on
    one line: ``gradflow: error: ...`` with exit status 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's own reads -1e4 as an option

    def error(self, message: str):
        self.exit(2, f"gradflow: error: {message.rstrip('.')} (see {self.prog} --help)\n")


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


def _times(count: int) -> None:
    if count < 2:
        raise ValueError(f"expected at least 2 recorded times (the start and the end), got {count}")


positive_int = _number(int, lambda x: check_int(x, "the value"), "a positive integer")
non_negative_int = _number(int, lambda x: check_int(x, "the value", minimum=0), "a non-negative integer")
num_times_type = _number(int, _times, "an integer >= 2")
alpha_type = _number(float, lambda x: check_scales(x, None, names=("alpha", "--log-alpha")), "a number in (0, 1)")
log_alpha_type = _number(float, lambda x: check_scales(None, x, names=("--alpha", "log alpha")), "a negative number")
positive_float = _number(float, _positive, "a positive number")
non_negative_float = _number(float, _non_negative, "a non-negative number")


def output_folder(*subfolders: str):
    """An argparse ``type`` for ``--out``: a folder that is writable, or that can be created, with ``subfolders``
    (those the command writes) folders where they exist; checked before anything is computed."""

    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError("expected a folder name, got ''")
        path = Path(text)
        existing = next(p for p in (path, *path.parents) if p.exists())
        if existing != path and not existing.is_dir():
            raise argparse.ArgumentTypeError(f"{existing} is a file, so no folder {text} can be made in it")
        for folder in (existing, *(path / sub for sub in subfolders if (path / sub).exists())):
            if not folder.is_dir():
                raise argparse.ArgumentTypeError(f"{folder} is a file, not a folder; give another folder")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise argparse.ArgumentTypeError(f"{folder} is not writable; give a folder you can write to")
        return text

    return parse


def add_out(p: argparse.ArgumentParser, default: str, *subfolders: str) -> None:
    """``--out`` (checked as it is read: a folder that can be written, with ``subfolders``) and ``--overwrite``."""
    p.add_argument("--out", type=output_folder(*subfolders), default=default, help=f"output folder (default {default})")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an output folder that holds another run's output (default: refuse)",
    )


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _merged(options: str) -> dict[str, str]:
    """Every family's ``options`` (``size_options`` or ``teacher_options``) by name, in order, with their helps
    joined where two families share one."""
    helps: dict[str, dict[str, None]] = {}
    for family in FAMILIES:
        for name, help_ in getattr(family, options).items():
            helps.setdefault(name, {})[help_] = None
    return {name: "; ".join(h) for name, h in helps.items()}


def add_model_options(p: argparse.ArgumentParser, *, alphas: bool = True, tau_default: str = "") -> None:
    by_family = "; ".join(f"{f.name} weights: {', '.join(sorted(f.tasks))}" for f in FAMILIES)
    p.add_argument(
        "--model",
        type=model_name,
        default="diagonal_attention",
        metavar="MODEL",
        help=f"built-in task (default: diagonal_attention, the paper's toy task; {by_family}), or your own: "
        "module:function, a function of no arguments in an importable module that returns a gradflow.models.Task "
        "(or anything with model, u0 and v0)",
    )
    sizes = p.add_argument_group("model sizes (each model takes its own; defaults are the model's)")
    for option, help_ in _merged("size_options").items():
        sizes.add_argument(_flag(option), type=positive_int, help=help_)
    teacher = p.add_argument_group("the teacher's singular values (full weights; defaults are the model's)")
    for option, help_ in _merged("teacher_options").items():
        teacher.add_argument(_flag(option), type=positive_float, nargs="+", metavar="S", help=help_)
    p.add_argument("--seed", type=non_negative_int, default=0, help="data, teacher and initialisation seed (default 0)")
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
        p.add_argument("--num-times", type=num_times_type, default=500, help="recorded times, >= 2 (default 500)")
        p.add_argument(
            "--atol",
            type=positive_float,
            default=1e-8,
            help="flow tolerance: local error of log w per step (default 1e-8)",
        )
        p.add_argument(
            "--rtol", type=non_negative_float, default=0.0, help="flow tolerance relative to |log w| (default 0)"
        )


BUILTIN_NAMES = [name for f in FAMILIES for name in sorted(f.tasks)]


def model_name(text: str) -> str:
    """An argparse ``type`` for ``--model``: a built-in task's name or ``module:function`` (a user's task)."""
    module, _, function = text.partition(":")
    if text in BUILTIN_NAMES or (module and function.isidentifier()):
        return text
    raise argparse.ArgumentTypeError(
        f"expected a built-in task ({', '.join(BUILTIN_NAMES)}) or module:function returning your own; got {text!r}"
    )


def is_own(model: str) -> bool:
    """Whether ``--model`` names a user's task (``module:function``)."""
    return ":" in model


def own_task(spec: str):
    """The task ``module:function`` returns (the module imported from the working folder or the path); a
    ``CLIError`` that says what went wrong."""
    module, function = spec.split(":")
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        make = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as err:
        raise CLIError(f"--model {spec}: cannot import it ({type(err).__name__}: {err})") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    task = make()
    missing = [a for a in ("model", "u0", "v0") if not hasattr(task, a)]
    if missing:
        raise CLIError(
            f"--model {spec}: {function}() must return a gradflow.models.Task (or anything with model, u0 and v0); "
            f"got a {type(task).__name__} without {', '.join(missing)}"
        )
    return task


def model_options(args) -> tuple[tuple[str, object], ...]:
    """The size and teacher options given for ``--model`` (an error for one it does not take) and its seed."""
    sizes = dict.fromkeys(k for e in TASKS.values() for k in e.sizes)  # every size option, in order
    given = [k for k in sizes if getattr(args, k) is not None]
    if is_own(args.model):
        given += [k for k in _merged("teacher_options") if getattr(args, k) is not None]
        if given:
            raise CLIError(f"{_flag(given[0])} applies to the built-in tasks; {args.model} builds its own")
        return ()
    entry = builtin(args.model)
    bad = [k for k in given if k not in entry.sizes]
    if bad:
        takes = " ".join(f"--{k}" for k in entry.sizes)
        raise CLIError(f"--{bad[0]} does not apply to {args.model} (it takes {takes} --seed)")
    teacher = [k for k in _merged("teacher_options") if getattr(args, k) is not None]
    bad = [k for k in teacher if k not in entry.teacher]
    if bad:
        takes = " ".join(_flag(k) for k in entry.teacher) or "none"
        raise CLIError(f"{_flag(bad[0])} does not apply to {args.model} (its teacher options: {takes})")
    sizes_given = tuple((k, getattr(args, k)) for k in given)
    return sizes_given + tuple((k, tuple(getattr(args, k))) for k in teacher) + (("seed", args.seed),)


def build_task(args) -> Task:
    """The task of ``--model``: a built-in one with its options (a builder's error says which model it is about), or
    the user's (``module:function``)."""
    options = model_options(args)
    if is_own(args.model):
        return own_task(args.model)
    try:
        return builtin(args.model).build(**dict(options))
    except ValueError as err:
        raise CLIError(f"--model {args.model}: {err}") from None


def log_alphas(args) -> tuple[float, ...]:
    """The scales ``--log-alpha`` or ``--alpha`` give (default the paper's), each once."""
    given = args.log_alpha if args.log_alpha is not None else args.alpha
    if given is not None and len(set(given)) != len(given):
        flag = "--log-alpha" if args.log_alpha is not None else "--alpha"
        twice = next(a for a in given if list(given).count(a) > 1)
        raise CLIError(f"{flag} gives {twice:g} twice: each scale is one run; give it once")
    if args.log_alpha is not None:
        return tuple(args.log_alpha)
    return tuple(math.log(a) for a in (args.alpha or PAPER_ALPHAS))
