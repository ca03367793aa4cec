"""Ctrl-C while the ``gradflow`` command starts: importing JAX takes seconds, and an interrupt there printed a
traceback from deep inside its import. In the command (``python -m gradflow`` or the ``gradflow`` script) it prints
one line and exits with status 130 instead, until :func:`started` hands Ctrl-C back to the command's own handling.
Imported first by the package (standard library only); a library import elsewhere is left as it is."""

from __future__ import annotations

import os
import signal
import sys
import threading

INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a process that Ctrl-C ended


def _as_command() -> bool:
    """Whether this process runs the ``gradflow`` command: ``python [options] -m gradflow`` or the console script."""
    argv = list(getattr(sys, "orig_argv", ()))
    module = argv.index("-m") if "-m" in argv else -1
    if 0 <= module < len(argv) - 1 and argv[module + 1] == "gradflow":
        return True
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("gradflow", "gradflow.exe")


def _interrupted(signum, frame) -> None:
    """Exit at once: an exception raised here could unwind through JAX's native initialisation (its MLIR bindings),
    which aborts the process ("terminate called after throwing ..."); nothing is computed yet, so nothing is lost."""
    sys.stdout.flush()
    print("gradflow: interrupted while starting; nothing was computed", file=sys.stderr, flush=True)
    os._exit(INTERRUPTED_STATUS)


def quiet_start() -> None:
    """In the command's main thread with Python's default handler: Ctrl-C ends the start with one line."""
    if (
        _as_command()
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _interrupted)


def started() -> None:
    """The command has parsed its arguments: Ctrl-C raises ``KeyboardInterrupt`` again, which it handles."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


quiet_start()
