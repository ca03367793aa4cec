"""Ctrl-C during a training run: the first asks the loop to stop, a second stops at once but not inside a write."""

import os
import signal
import threading
import time

import pytest

from gradflow.nets._stop import StopRequest


def test_a_second_ctrl_c_stops_at_once_but_not_inside_a_write():
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(KeyboardInterrupt):
            with stop.deferred():
                os.kill(os.getpid(), signal.SIGINT)
                written = True  # the block runs to its end
        assert written
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)


def test_ctrl_c_is_left_alone_outside_the_main_thread_and_restored_after():
    """Only the main thread's handler is replaced (Python delivers signals there); the previous one is back after."""
    seen = []

    def worker():
        with StopRequest():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
    with StopRequest() as stop:
        assert signal.getsignal(signal.SIGINT) == stop._handle
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
