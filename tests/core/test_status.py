"""The transition table: every legal move, and illegal ones raise naming status and event."""

from __future__ import annotations

import itertools
import re

import pytest

from pyjobq.core.status import TERMINAL, TRANSITIONS, Event, Status, apply
from pyjobq.errors import IllegalTransition, PyjobqError
from source_scan import lines_matching  # tests/ is on sys.path

S, E = Status, Event
EXPECTED = {
    (S.PENDING, E.CLAIM): S.RUNNING,
    (S.PENDING, E.PARK): S.PAUSED,
    (S.PENDING, E.CANCEL): S.CANCELLED,
    (S.PENDING, E.FAIL): S.FAILED,
    (S.RUNNING, E.SUCCEED): S.DONE,
    (S.RUNNING, E.RETRY): S.PENDING,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.RECOVER): S.PENDING,
    (S.RUNNING, E.PARK): S.PAUSED,
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    (S.PAUSED, E.UNPARK): S.PENDING,
    (S.PAUSED, E.CANCEL): S.CANCELLED,
    (S.PAUSED, E.FAIL): S.FAILED,
    (S.FAILED, E.REVIVE): S.PENDING,
    (S.CANCELLED, E.REVIVE): S.PENDING,
}
ILLEGAL = [key for key in itertools.product(Status, Event) if key not in EXPECTED]


def test_the_table_is_exactly_the_expected_moves() -> None:
    assert TRANSITIONS == EXPECTED


@pytest.mark.parametrize("status,event", sorted(EXPECTED, key=str))
def test_legal_move(status: Status, event: Event) -> None:
    assert apply(status, event) is EXPECTED[(status, event)]
    assert apply(status.value, event.value) is EXPECTED[(status, event)]


@pytest.mark.parametrize("status,event", ILLEGAL)
def test_illegal_move_raises_naming_status_and_event(status: Status, event: Event) -> None:
    with pytest.raises(IllegalTransition) as info:
        apply(status, event)
    assert (info.value.status, info.value.event) == (status.value, event.value)
    assert repr(status.value) in str(info.value) and repr(event.value) in str(info.value)
    assert isinstance(info.value, PyjobqError)


def test_done_is_a_dead_end() -> None:
    assert [e for e in Event if (S.DONE, e) in TRANSITIONS] == []


@pytest.mark.parametrize("status,event", [("sleeping", "claim"), ("pending", "explode"), ("", "")])
def test_unknown_strings_raise_illegal_transition(status: str, event: str) -> None:
    with pytest.raises(IllegalTransition) as info:
        apply(status, event)
    assert (info.value.status, info.value.event) == (status, event)


def test_terminal_statuses() -> None:
    assert TERMINAL == {S.DONE, S.FAILED, S.CANCELLED}


# ---------------------------------------------------------------- the named sets everyone imports

def test_the_named_sets() -> None:
    from pyjobq.core.status import (
        CLAIMABLE,
        KNOWN,
        ONLY_FAILED,
        ONLY_PAUSED,
        ONLY_PENDING,
        ONLY_RUNNING,
        REVIVABLE,
        UNFINISHED,
    )

    assert KNOWN == set(Status)
    assert UNFINISHED == {S.PENDING, S.RUNNING, S.PAUSED}
    assert UNFINISHED | TERMINAL == KNOWN and not UNFINISHED & TERMINAL
    # Exactly what the table lets revive and cancel.
    assert REVIVABLE == {S.FAILED, S.CANCELLED} == {s for s, e in TRANSITIONS if e is E.REVIVE}
    assert UNFINISHED == {s for s, e in TRANSITIONS if e is E.CANCEL}
    assert CLAIMABLE == {S.PENDING, S.RUNNING}
    assert (ONLY_PENDING, ONLY_RUNNING, ONLY_PAUSED, ONLY_FAILED) == (
        {S.PENDING}, {S.RUNNING}, {S.PAUSED}, {S.FAILED})
    # A raw stored string is found in them too: the stores need no sets of values of their own.
    assert "done" in TERMINAL and "pending" in UNFINISHED
    assert "running" in CLAIMABLE and "later" not in KNOWN


#: A status set spelt out (``frozenset({Status.X ...})``, ``frozenset({"done", ...})``) rather than
#: imported from pyjobq/core/status.py.
STATUS_SET = re.compile(
    r"""frozenset\(\{\s*(Status\.|["'](pending|running|paused|done|failed|cancelled)["'])"""
    r"""|frozenset\((s\.value for s in )?Status\)""")


def status_sets() -> dict[str, list[str]]:
    return lines_matching(STATUS_SET, skip={"pyjobq/core/status.py"})


def test_no_status_set_is_spelt_out_outside_the_status_module() -> None:
    assert STATUS_SET.search('_FINISHED = frozenset({"done", "failed", "cancelled"})')
    assert STATUS_SET.search("_PENDING = frozenset({Status.PENDING})")
    assert STATUS_SET.search("_STATUSES = frozenset(s.value for s in Status)")
    assert status_sets() == {}


def test_a_status_reads_as_users_read_it() -> None:
    """As users read it: ``Outcome(status='done', ...)``, never ``<Status.DONE: 'done'>``."""
    from pyjobq.core.outcome import Outcome

    assert repr(Status.DONE) == "'done'" and str(Status.FAILED) == "failed"
    assert repr([Status.PENDING, Status.CANCELLED]) == "['pending', 'cancelled']"
    assert "status='done'" in repr(Outcome(id="j1", status=Status.DONE))
    assert f"{Status.RUNNING}" == "running" and Status("paused") is Status.PAUSED
