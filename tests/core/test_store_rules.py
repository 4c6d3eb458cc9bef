"""The store rules (pyjobq/core/store_rules.py), each on its own; the contract suite
(tests/store_contract.py) checks every store keeps them, and the last test here that every store
module takes them from that one module."""

from __future__ import annotations

import ast
import logging
import math
from pathlib import Path

import pytest

from pyjobq.core import store_rules as rules
from pyjobq.core.periodic import SCHEDULE_VERSION, Schedule, ScheduleDefinition
from pyjobq.core.ports import REPLACE, Change, KeyChange, Updated
from pyjobq.core.status import Status
from pyjobq.testing import record

PACKAGE = Path(__file__).resolve().parents[2] / "pyjobq"


def test_oldest_first_orders_by_created_at_then_id():
    a, b, c = record("b", created_at=2), record("a", created_at=2), record("z", created_at=1)
    assert [r.id for r in rules.oldest_first([a, b, c])] == ["z", "a", "b"]


@pytest.mark.parametrize("value, expected", [
    (3, 3.0), (2.5, 2.5), (True, None), (math.nan, None), (math.inf, None), ("1", None),
    (None, None)])
def test_number_is_a_finite_int_or_float_never_a_bool(value, expected):
    assert rules.number(value) == expected


def test_is_status_takes_any_stored_value_unhashable_too():
    assert rules.is_status("pending", {Status.PENDING})
    assert not rules.is_status(["pending"], {Status.PENDING})
    assert not rules.is_status({"a": 1}, {Status.PENDING})


@pytest.mark.parametrize("at, expected", [
    (5, True), (1, False), (math.nan, False), (True, False), (None, False), ("x", True),
    ([1], True), ({}, False)])
def test_later_is_the_by_next_retry_index_above_a_bound(at, expected):
    assert rules.later(at, 2) is expected


def test_soonest_counts_only_claimable_finite_moments_past_after():
    timed = [("done", 1), ("pending", math.nan), ("pending", 9), ("running", 4), ("paused", 2),
             (["pending"], 0), ("pending", True)]
    assert rules.soonest(timed, None) == 4
    assert rules.soonest(timed, 4) == 9
    assert rules.soonest(timed, 9) is None


def test_last_per_key_keeps_the_last_waiting_record_of_each_key():
    first, second = record("1", key="k"), record("2", key="k")
    history = record("3", key="k", status=Status.DONE)
    kept, dropped = rules.last_per_key([first, history, second])
    assert [r.id for r in kept] == ["3", "2"]
    assert [r.id for r in dropped] == ["1"]
    assert not rules.replaces(history) and rules.replaces(second)


def test_check_ids_refuses_an_id_twice_in_one_add():
    rules.check_ids([record("1"), record("2")])
    with pytest.raises(KeyError, match="twice"):
        rules.check_ids([record("1"), record("1")])


def test_replaced_by_takes_the_waiting_records_of_the_keys_oldest_first():
    found = [record("b", key="k", created_at=2), record("a", key="k", created_at=3),
             record("r", key="k", status=Status.RUNNING), record("o", key="other")]
    assert [r.id for r in rules.replaced_by({"k"}, found)] == ["b", "a"]


def test_apply_changes_sees_an_earlier_change_of_the_same_id_and_writes_each_id_once():
    stored = {"1": record("1", attempts=0)}

    def load(_i, change):
        current = stored.get(change.job_id)
        return Updated(None, False) if current is None else current

    bump = Change("1", lambda r: r.evolve(attempts=r.attempts + 1))
    applied = rules.apply_changes([bump, bump, Change("gone", lambda r: r)], load)
    assert [u.record.attempts for u in applied.done[:2]] == [1, 2]
    assert applied.done[2] == Updated(None, False)
    assert [(r.id, r.attempts) for r in applied.writes] == [("1", 2)]


def test_apply_changes_leaves_a_record_whose_status_is_not_when():
    current = record("1")
    applied = rules.apply_changes(
        [Change("1", lambda r: r.evolve(attempts=9), {Status.RUNNING})], lambda _i, _c: current)
    assert applied.done == [Updated(current, False)] and applied.writes == []


def test_decide_keyed_leaves_replaces_or_writes():
    current, other = record("1", key="k"), record("2", key="k")
    seen = []

    def decide(r, others):
        seen.append([o.id for o in others])
        return REPLACE

    out = rules.decide_keyed(KeyChange("1", decide, {Status.PENDING}), current, [current, other])
    assert out == rules.KeyDecision(Updated(None, True), gone=current) and seen == [["2"]]
    left = rules.decide_keyed(KeyChange("1", decide, {Status.RUNNING}), current, [])
    assert left == rules.KeyDecision(Updated(current, False))
    new = current.evolve(attempts=3)
    wrote = rules.decide_keyed(KeyChange("1", lambda r, o: new, {Status.PENDING}), current, [])
    assert wrote == rules.KeyDecision(Updated(new, True), write=new)


def test_taken_decides_each_id_once():
    taken = rules.Taken()
    assert taken.first("1") and taken.first("2") and not taken.first("1")


def _schedule() -> Schedule:
    return Schedule(ScheduleDefinition("tidy", 60_000), 0.0, 1.0, 1.0)


def test_schedule_of_reads_ours_and_skips_malformed_ones_loudly_and_newer_ones_quietly(caplog):
    stored = _schedule()
    assert rules.schedule_of(stored.to_dict()) == stored
    with caplog.at_level(logging.ERROR, logger="pyjobq"):
        assert rules.schedule_of({"name": "tidy", "v": SCHEDULE_VERSION}) is None
    assert "not one" in caplog.text
    caplog.clear()
    newer = {**stored.to_dict(), "v": SCHEDULE_VERSION + 1}
    with caplog.at_level(logging.ERROR, logger="pyjobq"):
        assert rules.schedule_of(newer) is None
    assert caplog.text == ""
    assert rules.foreign_schedule(newer) and not rules.foreign_schedule(stored.to_dict())
    assert not rules.foreign_schedule({"v": True}) and not rules.foreign_schedule([1])


def test_put_schedule_never_overwrites_a_value_that_is_not_ours():
    stored = _schedule()
    later = Schedule(stored.definition, 60_000.0, 1.0, 2.0)
    assert rules.put_schedule(True, None, lambda s: later) == rules.PutSchedule(None, None)
    assert rules.put_schedule(False, None, lambda s: later) == rules.PutSchedule(later, later)
    assert rules.put_schedule(True, stored, lambda s: None) == rules.PutSchedule(None, stored)


def test_deletes_schedule_leaves_only_a_newer_pyjobqs():
    stored = _schedule()
    assert rules.deletes_schedule(stored, stored.to_dict())
    assert rules.deletes_schedule(None, {"name": "broken"})
    assert not rules.deletes_schedule(None, {**stored.to_dict(), "v": SCHEDULE_VERSION + 1})


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.update(f"{node.module}.{a.name}" if node.module else a.name
                         for a in node.names)
    return found


@pytest.mark.parametrize("module", ["memory/store.py", "browser/idb.py"])
def test_every_store_takes_its_rules_from_the_one_module(module):
    imports = _imports(PACKAGE / module)
    assert "core.store_rules" in imports, imports
    source = (PACKAGE / module).read_text()
    for rule in ("last_per_key", "apply_changes", "decide_keyed", "schedule_of",
                 "put_schedule", "deletes_schedule", "oldest_first"):
        assert f"rules.{rule}(" in source, f"{module} does not use rules.{rule}"
