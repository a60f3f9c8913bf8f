"""The jobs worker collects garbage between the instants its runs wait for, not on them."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from activities.agenda import Agenda
from worker.collector import QuietCollector


class Node:
    """A cycle only the cyclic collector frees."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def manual_gc() -> Iterator[None]:
    """Automatic collection off for the test (the collector under test takes it over)."""
    was = gc.isenabled()
    gc.disable()
    gc.collect()
    yield
    if was:
        gc.enable()


def garbage(objects: int = 2000) -> weakref.ref[Node]:
    """Enough new container objects to make a young collection due; a weak reference to one
    cycle among them."""
    nodes = [Node() for _ in range(objects)]
    probe = weakref.ref(nodes[0])
    del nodes
    return probe


def at(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_the_agenda_keeps_instants_in_order_and_counts_their_runs() -> None:
    agenda = Agenda()
    early, late = at(5), at(9)
    with agenda.waiting(late), agenda.waiting(early), agenda.waiting(early):
        assert agenda.next_due() == early.timestamp() and len(agenda) == 3
        assert not agenda.clear_for(6, settle=0)
        assert agenda.clear_for(4, settle=0)
    assert agenda.next_due() is None and len(agenda) == 0
    # the last run of an instant just stopped waiting: its start is still being measured
    assert not agenda.clear_for(60, settle=10)
    assert agenda.clear_for(60, settle=10, now=time.time() + 11)


def test_a_due_pass_waits_until_the_runs_due_soon_have_started(manual_gc: None) -> None:
    agenda = Agenda()
    collector = QuietCollector(agenda)
    collector.generations[0].estimate = 1.0  # a young pass is taken to need 2 s clear
    probe = garbage()
    with agenda.waiting(at(1.5)):
        assert collector.due() == 0
        assert collector.step() is None
        assert probe() is not None  # not collected: a run is due within the guard
    collector.generations[0].estimate = 0.001
    time.sleep(0.02)  # past the settle time after the last run stopped waiting
    assert collector.step() == 0
    assert probe() is None
    assert collector.generations[0].passes == 1 and collector.generations[0].forced == 0


def test_a_pass_that_never_finds_a_gap_runs_once_overdue(manual_gc: None) -> None:
    agenda = Agenda()
    collector = QuietCollector(agenda)
    young = collector.generations[0]
    young.estimate, young.overdue = 60.0, 0.05
    probe = garbage()
    with agenda.waiting(at(30)):
        assert collector.step() is None
        time.sleep(0.1)
        assert collector.step() == 0
    assert probe() is None and young.forced == 1


def test_a_full_pass_comes_after_enough_middle_ones_and_not_more_often_than_set(manual_gc: None) -> None:
    collector = QuietCollector(Agenda(), full_every=3600)
    seen = []
    for _ in range(200):
        garbage()
        if (generation := collector.step()) is not None:
            seen.append(generation)
    assert 1 in seen and 2 not in seen  # a full pass waits for full_every
    collector.full_every = 0
    for _ in range(200):
        garbage()
        if (generation := collector.step()) is not None:
            seen.append(generation)
    assert 2 in seen
    # the young and middle generations are collected in the interpreter's own proportions
    assert seen.count(0) > seen.count(1) > 0


async def test_running_it_turns_automatic_collection_off_and_back_on() -> None:
    agenda = Agenda()
    stop = asyncio.Event()
    collector = QuietCollector(agenda, tick=0.005)
    task = asyncio.create_task(collector.run(stop))
    await asyncio.sleep(0.02)
    assert not gc.isenabled()
    probe = garbage()
    for _ in range(100):
        if probe() is None:
            break
        await asyncio.sleep(0.01)
    assert probe() is None  # collected by the collector, automatic collection being off
    stop.set()
    await task
    assert gc.isenabled()


async def test_a_chore_waits_for_the_gap_after_the_runs_due_soon() -> None:
    agenda = Agenda()
    instant = at(0.2)

    async def runs_due() -> None:  # the runs wait for their instant, as jobs do
        with agenda.waiting(instant), agenda.waiting(instant):
            await asyncio.sleep(instant.timestamp() - time.time())

    waiting = asyncio.create_task(runs_due())
    await asyncio.sleep(0.01)
    await agenda.gap(0.5, settle=0.05, within=2.0)  # the instant is within 0.5 s: wait
    done = time.time()
    assert waiting.done() and done >= instant.timestamp() + 0.05
    assert done < instant.timestamp() + 0.5
    # Clear already: at once. Never clear: no later than asked.
    began = time.monotonic()
    await agenda.gap(0.5, settle=0.0, within=2.0)
    assert time.monotonic() - began < 0.05
    with agenda.waiting(at(60)):
        began = time.monotonic()
        await agenda.gap(120, settle=0.0, within=0.2)
        assert 0.2 <= time.monotonic() - began < 0.4
