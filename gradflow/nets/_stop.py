"""Ctrl-C during a training run: stop after the step in flight, save what is done, say how to resume."""

from __future__ import annotations

import contextlib
import signal
import threading

import jax


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (SIGINT) after a whole step; its message says what was kept and how to resume."""


class StopRequest:
    """SIGINT while a run trains: the first asks the loop to stop after the step in flight (``requested``); a
    second raises ``KeyboardInterrupt`` at once, or, inside ``deferred()`` (writing a checkpoint or a record), at
    the end of that block. Installed only in the main thread of a single-process run: elsewhere (and in a run of
    several processes, which must stop together) Ctrl-C raises ``KeyboardInterrupt`` as usual."""

    def __init__(self):
        self.requested = False
        self._deferring = self._pending = False
        self._previous = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread() and jax.process_count() == 1:
            previous = signal.signal(signal.SIGINT, self._handle)
            self._previous = signal.default_int_handler if previous is None else previous
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum, frame) -> None:
        if not self.requested:
            self.requested = True
        elif self._deferring:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self):
        """A block that a second Ctrl-C does not cut short."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending:
            raise KeyboardInterrupt
