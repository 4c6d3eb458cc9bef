"""Periodic work (``@pyjobq.periodic``): each due slot enqueued once per origin, on simulated tabs.

The rules (pyjobq/core/periodic.py, docs/periodic.md): slots are multiples of ``every`` since the
epoch; only the lease holder enqueues, in one transaction with the schedule's advance; a missed
slot runs once (the latest); a slot due while the previous occurrence is unfinished is skipped.
The slot arithmetic itself is tests/core/test_schedule.py; the simulation's oracles over many
schedules are tests/test_simulation.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from pyjobq.abort import AbortSignal
from pyjobq.core.errors import InvalidJobError
from pyjobq.core.periodic import ScheduleDefinition, occurrence_id, slot_at
from pyjobq.engine.lease import PING_MS, SILENT_PINGS
from pyjobq.executor.current import current_job_id
from pyjobq.service_worker import config_json
from pyjobq.tasks.periodic import Periodic, periodic
from pyjobq.testing import Tab, World, run, settle

MINUTE = 60_000.0
NAME = "tests:tick"


class Ticks:
    """A periodic function that counts its runs, by job id and tab."""

    def __init__(self, *, hold: asyncio.Future[None] | None = None) -> None:
        self.runs: list[tuple[str, str | None]] = []
        self.hold = hold

    def schedule(self, tab_name: str, every_ms: float = MINUTE,
                 **options: Any) -> Periodic[Any]:
        async def tick(signal: AbortSignal) -> str:
            self.runs.append((tab_name, current_job_id()))
            if self.hold is not None:
                await self.hold
            return "ticked"

        return Periodic(tick, ScheduleDefinition(name=NAME, every_ms=every_ms,
                                                 type=options.pop("type", NAME), **options))

    def ids(self) -> list[str | None]:
        return [job_id for _, job_id in self.runs]


def open_with(world: World, ticks: Ticks, **options: Any) -> Tab:
    """A tab whose page defines the schedule (as a page's ``@periodic`` does when it loads)."""
    every_ms = options.pop("every_ms", MINUTE)
    tab = world.open_tab(**options)
    ticks.schedule(tab.name, every_ms).attach(tab.side)
    return tab


async def defined(**options: Any) -> tuple[World, Ticks, Tab]:
    """A new world with one tab (``options`` go to :func:`open_with`) whose page defines the
    schedule, settled."""
    world, ticks = World(), Ticks()
    tab = open_with(world, ticks, **options)
    await settle()
    return world, ticks, tab


async def occurrences(world: World) -> list[str]:
    return sorted(r.id for r in await world.store.all() if r.id.startswith(f"periodic:{NAME}:"))


async def to_next_slot(world: World, every_ms: float = MINUTE, *, past: float = 1.0) -> float:
    """Advance the clock just past the next slot; returns that slot."""
    now = world.clock.now()
    slot = slot_at(every_ms, now) + every_ms
    await world.advance(slot - now + past)
    return slot


def slot_id(slot: float) -> str:
    return occurrence_id(NAME, slot)


# ---------------------------------------------------------------- the basics

def test_a_new_schedule_starts_at_the_next_slot_and_runs_once_per_slot() -> None:
    async def main() -> None:
        world, ticks, _ = await defined(page_lease=True)
        stored = world.store.raw_schedules()[NAME]
        assert stored["last_slot"] == slot_at(MINUTE, world.clock.now())
        assert await occurrences(world) == []  # nothing at definition
        slots = [await to_next_slot(world) for _ in range(3)]
        assert await occurrences(world) == [slot_id(s) for s in slots]
        assert ticks.ids() == [slot_id(s) for s in slots]
        for slot in slots:
            record = await world.store.get(slot_id(slot))
            assert (record.status.value, record.result, record.type, record.label) == (
                "done", "ticked", NAME, NAME)
            assert record._params == {"schedule": NAME, "slot": slot}
    run(main)


def test_the_holder_wakes_for_the_slot_by_a_timer_not_a_poll() -> None:
    async def main() -> None:
        world, ticks, tab = await defined(page_lease=True)
        assert tab.scheduler is not None
        looks = tab.scheduler.looks
        slot = slot_at(MINUTE, world.clock.now()) + MINUTE
        await world.advance(slot - world.clock.now() - 1)  # a millisecond before the slot
        assert await occurrences(world) == []
        before = tab.scheduler.looks
        await world.advance(1)  # the slot: enqueued at its moment
        assert await occurrences(world) == [slot_id(slot)]
        # The idle holder looks only at its 30 s re-reads and the slot, never in between.
        assert before - looks <= 3, (looks, before)
    run(main)


def test_a_definition_changed_on_reload_updates_the_stored_one() -> None:
    async def main() -> None:
        world, ticks, tab = await defined(page_lease=True)
        first = await to_next_slot(world)
        tab.crash()
        # The page's next release runs it every two minutes.
        open_with(world, ticks, page_lease=True, every_ms=2 * MINUTE)
        await settle()
        assert world.store.raw_schedules()[NAME]["every_ms"] == 2 * MINUTE
        now = world.clock.now()
        nxt = slot_at(2 * MINUTE, now) + 2 * MINUTE
        await world.advance(nxt - now + 1)
        await world.advance(2 * MINUTE)
        assert await occurrences(world) == [slot_id(first), slot_id(nxt), slot_id(nxt + 2 * MINUTE)]
    run(main)


def test_unschedule_stops_every_tab_enqueueing_it_and_keeps_its_jobs() -> None:
    async def main() -> None:
        world, ticks = World(), Ticks()
        tab = world.open_tab(page_lease=True)
        schedule = ticks.schedule(tab.name)
        schedule.attach(tab.side)
        other = open_with(world, ticks, page_lease=True)
        await settle()
        slot = await to_next_slot(world)
        assert await other.side.unschedule(NAME) is True
        assert await other.side.unschedule(NAME) is False
        await settle()
        await world.advance(5 * MINUTE)
        assert await occurrences(world) == [slot_id(slot)]
        assert world.store.raw_schedules() == {}
        assert await tab.side.schedules() == []
    run(main)


# ---------------------------------------------------------------- once per origin

def test_three_tabs_and_a_frozen_holder_enqueue_each_slot_exactly_once() -> None:
    async def main() -> None:
        world, ticks = World(), Ticks()
        tabs = [open_with(world, ticks, page_lease=True) for _ in range(3)]
        await settle()
        slots = [await to_next_slot(world) for _ in range(2)]
        holder = next(t for t in tabs if t.holds_lease)
        holder.freeze()  # its page lets the lease go; another tab takes it
        await settle()
        slots += [await to_next_slot(world) for _ in range(2)]
        taker = next(t for t in tabs if t.holds_lease)
        assert taker is not holder
        holder.resume()  # its held timer fires: it decides on slots already taken, and finds so
        await settle()
        slots.append(await to_next_slot(world))
        assert await occurrences(world) == [slot_id(s) for s in slots]
        assert sorted(ticks.ids()) == [slot_id(s) for s in slots]  # each ran once
        enqueued = {t.name: t.scheduler.periodic.enqueued for t in tabs if t.scheduler}
        assert sum(enqueued.values()) == len(slots), enqueued
        assert world.violations == []
    run(main)


def test_a_frozen_worker_host_holder_is_taken_over_and_the_next_slot_enqueued_once() -> None:
    async def main() -> None:
        world, ticks, host = await defined(worker_host=True)
        await world.advance(1)
        assert host.holds_lease
        tabs = [open_with(world, ticks, page_lease=True, waiting=True) for _ in range(2)]
        await settle()
        first = await to_next_slot(world)
        host.freeze()  # a notebook kernel frozen with its page keeps the lock
        # The tabs in line find it silent and take the lease within the watch's bound.
        for _ in range(int(SILENT_PINGS + 3)):
            await world.advance(PING_MS)
        assert any(t.holds_lease for t in tabs)
        now = world.clock.now()
        latest = slot_at(MINUTE, now)
        assert world.store.raw_schedules()[NAME]["last_slot"] == latest  # caught up
        host.resume()
        await settle()
        after = await to_next_slot(world)
        ids = await occurrences(world)
        assert ids == sorted(set(ids)) and slot_id(first) in ids and slot_id(after) in ids
        assert ids[-1] == slot_id(after) and len(ticks.ids()) == len(set(ticks.ids()))
        # While frozen, slots passed one by one: every one was enqueued once, by the tabs in line
        # once they held the lease, or skipped as missed while no awake tab held it.
        assert world.violations == []
    run(main)


def test_a_reload_between_occurrences_enqueues_the_next_slot_once() -> None:
    async def main() -> None:
        world, ticks, tab = await defined(page_lease=True)
        first = await to_next_slot(world)
        await world.advance(20_000)
        tab.crash()  # the reload: the page goes ...
        open_with(world, ticks, page_lease=True)  # ... and comes back with the same code
        await settle()
        second = await to_next_slot(world)
        assert await occurrences(world) == [slot_id(first), slot_id(second)]
        assert ticks.ids() == [slot_id(first), slot_id(second)]
    run(main)


def test_a_long_absence_runs_one_occurrence_not_one_per_missed_slot() -> None:
    async def main() -> None:
        world, ticks, tab = await defined(page_lease=True)
        first = await to_next_slot(world)
        tab.crash()  # every tab closed: a night away
        await world.advance(8 * 60 * MINUTE + 30_000)
        open_with(world, ticks, page_lease=True)
        await settle()
        latest = slot_at(MINUTE, world.clock.now())
        assert await occurrences(world) == [slot_id(first), slot_id(latest)]
        assert ticks.ids() == [slot_id(first), slot_id(latest)]
        assert world.store.raw_schedules()[NAME]["last_slot"] == latest
    run(main)


def test_the_schedule_survives_a_restart_on_a_page_that_does_not_define_it() -> None:
    async def main() -> None:
        world, ticks, tab = await defined(page_lease=True)
        tab.crash()
        await world.advance(10 * MINUTE)
        # The next session: this page registers the function but never defines the schedule.
        schedule = ticks.schedule("later")
        runner = world.open_tab(page_lease=True,
                                reconstructors={NAME: schedule.factory})
        await settle()
        ids = await occurrences(world)
        assert len(ids) == 1 and ticks.ids() == ids
        slot = await to_next_slot(world)
        assert (await occurrences(world))[-1] == slot_id(slot)
        # A page that lacks the function fails it as orphaned, naming the reconstructor.
        runner.crash()
        world.open_tab(page_lease=True)
        await settle()
        orphan_slot = await to_next_slot(world)
        record = await world.store.get(slot_id(orphan_slot))
        assert (record.status.value, record.code) == ("failed", "orphaned")
        assert NAME in (record.error or "")
    run(main)


def test_a_slot_due_while_the_previous_occurrence_runs_is_skipped() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        world, ticks = World(), Ticks(hold=loop.create_future())
        tab = open_with(world, ticks, page_lease=True)
        await settle()
        first = await to_next_slot(world)
        assert ticks.ids() == [slot_id(first)]  # running, held
        await to_next_slot(world)
        await to_next_slot(world)
        assert await occurrences(world) == [slot_id(first)]  # two slots coalesced
        assert tab.scheduler is not None and tab.scheduler.periodic.skipped == 2
        assert ticks.hold is not None
        ticks.hold.set_result(None)
        await settle()
        ticks.hold = None
        after = await to_next_slot(world)
        assert await occurrences(world) == [slot_id(first), slot_id(after)]
    run(main)


# ---------------------------------------------------------------- the decorator

@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """No schedule defined, no queue started, and the settings' reconstructors as they were
    (a decorator registers its reconstructor there)."""
    from pyjobq import config
    from pyjobq.tasks import periodic as periodic_module

    monkeypatch.setattr(periodic_module, "_defined", {})
    monkeypatch.setattr(periodic_module, "_queue", None)
    monkeypatch.setattr(config, "_settings", config.settings())


def test_the_decorator_checks_its_arguments_and_keeps_the_function_callable(fresh: None) -> None:
    from pyjobq.tasks import periodic as periodic_module

    with pytest.raises(InvalidJobError, match="timedelta"):
        periodic(every=900)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match="at least a second"):
        periodic(every=timedelta(milliseconds=10))
    with pytest.raises(InvalidJobError, match="max_attempts"):
        periodic(every=timedelta(minutes=1), max_attempts=0)(tidy)

    tidy_every = periodic(every=timedelta(minutes=15))(tidy)
    assert tidy_every.name == f"{__name__}:tidy"
    assert tidy_every.definition.every_ms == 15 * MINUTE
    assert tidy_every.definition.type == tidy_every.name
    assert asyncio.run(tidy_every(AbortSignal())) == "tidied"  # still the function
    assert periodic_module._defined == {tidy_every.name: tidy_every}


async def tidy(signal: AbortSignal) -> str:
    return "tidied"


def test_a_function_that_cannot_be_called_with_the_signal_alone_is_refused_saying_how(
        fresh: None) -> None:
    from pyjobq import config
    from pyjobq.tasks import periodic as periodic_module

    async def keyword_signal(*, signal: AbortSignal) -> None: ...

    async def no_parameter() -> None: ...

    async def needs_an_argument(signal: AbortSignal, doc: str) -> None: ...

    class Chores:
        async def tidy(self) -> None: ...

    every = periodic(every=timedelta(minutes=1))
    with pytest.raises(InvalidJobError, match=r"needs an async def.*`async def <lambda>\(signal\)"):
        every(lambda signal: None)  # type: ignore[arg-type, return-value]
    for fn in (keyword_signal, no_parameter):
        with pytest.raises(InvalidJobError, match=r"first parameter receives the job's "
                                                  rf"AbortSignal; write `async def {fn.__name__}"
                                                  r"\(signal\): ...`$"):
            every(fn)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match=r"with the job's AbortSignal alone .*'doc'.*"
                                              r"`async def needs_an_argument\(signal\): ...`"):
        every(needs_an_argument)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobError, match=r"Chores.tidy looks like a method .*'self'.*"
                                              r"module-level async def$"):
        every(Chores.tidy)  # type: ignore[arg-type]

    async def optional_rest(signal: AbortSignal, limit: int = 3) -> int:
        return limit

    assert asyncio.run(every(optional_rest)(AbortSignal())) == 3
    refused = {"keyword_signal", "no_parameter", "needs_an_argument", "tidy", "<lambda>"}
    assert not [n for n in config.settings().reconstructors if n.rpartition(".")[2] in refused]
    assert [n.rpartition(".")[2] for n in periodic_module._defined] == ["optional_rest"]


def test_the_reconstructor_is_registered_with_its_module_before_the_queue_starts(
        fresh: None) -> None:
    from pyjobq import config

    tidy_every = periodic(every=timedelta(minutes=15))(tidy)
    settings = config.settings()
    assert settings.reconstructors[tidy_every.name] == tidy_every.factory
    assert settings.reconstructor_modules[tidy_every.name] == __name__
    run_job = tidy_every.factory(None)
    assert asyncio.run(run_job(AbortSignal())) == "tidied"  # the job runs f(signal)
    # What the Service Worker is told to import to run them, as for a task.
    sw_config = json.loads(config_json(dataclasses.replace(settings, transport_path="app:send")))
    assert sw_config["tasks"][tidy_every.name] == __name__


def test_a_name_that_is_another_reconstructor_is_refused(fresh: None) -> None:
    import pyjobq

    async def rebuild(params: Any) -> None: ...

    pyjobq.configure(reconstructors={"tests:taken": lambda params: rebuild})
    with pytest.raises(InvalidJobError, match=r"'tests:taken' is already a reconstructor .*"
                                              r"another name="):
        periodic(every=timedelta(minutes=1), name="tests:taken")(tidy)
    again = periodic(every=timedelta(minutes=1), name="tests:mine")(tidy)
    assert periodic(every=timedelta(minutes=2), name="tests:mine")(tidy) is not again  # re-run


def test_a_schedule_defined_before_the_queue_takes_effect_when_it_starts(fresh: None) -> None:
    from pyjobq.tasks import periodic as periodic_module

    async def main() -> None:
        world = World()
        tab = world.open_tab(page_lease=True)

        @periodic(every=timedelta(minutes=1), name=NAME, label="Tidy up")
        async def tidy_up(signal: AbortSignal) -> str:
            return "tidied up"

        await settle()
        assert world.store.raw_schedules() == {}  # the queue has not started
        periodic_module.started(tab.side)
        await settle()
        assert world.store.raw_schedules()[NAME]["label"] == "Tidy up"
        slot = await to_next_slot(world)
        record = await world.store.get(slot_id(slot))
        assert (record.status.value, record.result, record.label) == (
            "done", "tidied up", "Tidy up")
    run(main)


def test_importing_and_applying_the_decorator_does_not_start_the_queue() -> None:
    import subprocess
    import sys

    code = ("import sys, datetime, pyjobq\n"
            "@pyjobq.periodic(every=datetime.timedelta(minutes=5))\n"
            "async def f(signal): pass\n"
            "assert 'pyjobq.queue' not in sys.modules, 'the queue was imported'\n"
            "pyjobq.configure(db_name='after-periodic')\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_stored_schedule_that_is_not_one_is_skipped_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        world, ticks = World(), Ticks()
        world.store.put_raw_schedule({"name": "broken", "every_ms": "often"})
        world.store.put_raw_schedule({"name": "newer", "v": 9, "every_ms": 1000})
        open_with(world, ticks, page_lease=True)
        await settle()
        slot = await to_next_slot(world)
        assert await occurrences(world) == [slot_id(slot)]
        assert set(world.store.raw_schedules()) == {"broken", "newer", NAME}

    with caplog.at_level(logging.ERROR, logger="pyjobq"):
        run(main)
    assert any("broken" in r.getMessage() for r in caplog.records)


def test_in_a_notebook_a_cell_run_after_the_queue_started_takes_effect_at_once(
        fresh: None) -> None:
    from pyjobq.tasks import periodic as periodic_module

    async def main() -> None:
        world = World()
        tab = world.open_tab(page_lease=True)
        periodic_module.started(tab.side)  # the kernel imported the queue in an earlier cell
        await settle()

        def cell(minutes: int) -> Periodic[Any]:
            @periodic(every=timedelta(minutes=minutes), name=NAME)
            async def report(signal: AbortSignal) -> str:
                return f"every {minutes}"
            return report

        cell(1)
        await settle()
        assert world.store.raw_schedules()[NAME]["every_ms"] == MINUTE
        stored = world.store.raw_schedules()[NAME]
        cell(1)  # the same cell run again: nothing changes
        await settle()
        assert world.store.raw_schedules()[NAME] == stored
        cell(2)  # edited and run again: the stored schedule follows
        await settle()
        assert world.store.raw_schedules()[NAME]["every_ms"] == 2 * MINUTE
        slot = await to_next_slot(world, 2 * MINUTE)
        record = await world.store.get(slot_id(slot))
        assert record.result == "every 2"
        assert await cell(2).cancel() is True
        assert world.store.raw_schedules() == {} and periodic_module._defined == {}
    run(main)
