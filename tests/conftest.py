"""Shared fixtures: real mosquitto brokers on free ports, and recording subscribers."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.agent_proc import STARTED
from tests.brokers import MOSQUITTO, Broker, Recorder


@pytest.fixture(autouse=True)
def _no_agent_outlives_its_test() -> Iterator[None]:
    """Kills what a test's own agents left running (a failed assertion between a start and
    its stop); the agents of a module's fixture, started before this, are that fixture's."""
    before = len(STARTED)
    yield
    while len(STARTED) > before:
        STARTED.pop().close()


@pytest.fixture
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Broker]]:
    """Factory: ``mosquitto(message_size_limit=None, persistence=True, start=True)``.

    Each broker gets its own port, config and writable persistence dir; all are killed at
    the end of the test.
    """
    if shutil.which(MOSQUITTO) is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    brokers: list[Broker] = []

    def make(*, start: bool = True, **kwargs: Any) -> Broker:
        broker = Broker(tmp_path_factory.mktemp("mosquitto"), **kwargs)
        brokers.append(broker)
        if start:
            broker.start()
        return broker

    yield make
    for broker in brokers:
        broker.close()


@pytest.fixture
def broker(mosquitto: Callable[..., Broker]) -> Broker:
    """One running broker with persistence."""
    return mosquitto()


@pytest.fixture
def recorder() -> Iterator[Callable[..., Recorder]]:
    """Factory: ``recorder(broker, ["topic/#"])`` -> a started persistent-session subscriber."""
    made: list[Recorder] = []

    def make(broker: Broker, filters: list[str], **kwargs: Any) -> Recorder:
        rec = Recorder(broker, filters, **kwargs)
        made.append(rec)
        return rec.start()

    yield make
    for rec in made:
        rec.close()
