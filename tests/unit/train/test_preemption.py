"""SIGTERM and SIGINT set the stop flag; handlers chain; no process group: the local flag."""

from __future__ import annotations

import os
import signal

import pytest

from corral import train


def test_sigterm_sets_the_flag() -> None:
    train.install_signal_handlers()
    assert not train.should_stop()
    os.kill(os.getpid(), signal.SIGTERM)
    assert train.stop_requested()
    assert train.should_stop()


def test_install_is_idempotent_and_uninstall_restores() -> None:
    before = signal.getsignal(signal.SIGTERM)
    train.install_signal_handlers()
    handler = signal.getsignal(signal.SIGTERM)
    train.install_signal_handlers()
    assert signal.getsignal(signal.SIGTERM) == handler
    train.uninstall_signal_handlers()
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_previous_python_handler_is_still_called() -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        train.install_signal_handlers()
        os.kill(os.getpid(), signal.SIGTERM)
        assert calls == [signal.SIGTERM]
        assert train.should_stop()
    finally:
        train.uninstall_signal_handlers()
        signal.signal(signal.SIGTERM, previous)


def test_second_sigint_interrupts_as_before() -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        train.install_signal_handlers()
        os.kill(os.getpid(), signal.SIGINT)  # the first one only asks to stop
        assert train.should_stop()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        train.uninstall_signal_handlers()
        signal.signal(signal.SIGINT, previous)


def test_request_stop_without_a_signal() -> None:
    train.request_stop()
    assert train.should_stop()
