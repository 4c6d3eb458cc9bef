"""Message validation: everything read from a worker or a channel goes through parse()."""

from __future__ import annotations

import pytest

from pyjobq.core.messages import VERSION, BadMessage, make, parse

VALID = [
    make("enqueue", jobs=[], request_id="r1"),
    make("enqueue", jobs=[{"id": "a"}], request_id=None),
    make("wake"),
    make("run", job_id="j", reconstructor="fetch", params={"x": 1}, job_type="t", attempt=1,
         claim="tab1:1"),
    make("run", job_id="j", reconstructor="fetch", params=None, job_type="t", attempt=2,
         claim="tab1:2"),
    make("run_started", job_id="j", claim="tab1:1"),
    make("run_check", job_id="j", claim="tab1:3"),
    make("run_checked", job_id="j", claim="tab1:3", started=False),
    make("run_result", job_id="j", ok=True, result=[1], claim="tab1:1"),
    make("run_result", job_id="j", ok=False, error="e", status=500, claim="tab1:1"),
    make("abandon_run", job_id="j", claim="tab1:1"),
    make("delete_job", job_id="j", request_id="r"),
    make("delete_group", group="g", request_id=None),
    make("cancel_job", job_id="j", request_id="r"),
    make("retry_job", job_id="j", request_id="r"),
    make("retry_all", request_id="r"),
    make("query_all", request_id="r"),
    make("get_job", job_id="j", request_id="r"),
    make("ended_jobs", job_ids=["j", "k"], request_id="r"),
    make("cleanup_old", request_id=None),
    make("reply", request_id="r", ok=True, value=3),
    make("ready", source="s"),
    make("job-update", jobs=[{"id": "j"}], source="s"),
    make("schedule", schedule={"name": "tidy", "every_ms": 60_000}, request_id="r"),
    make("unschedule", name="tidy", request_id=None),
    make("schedules", request_id="r"),
    make("schedule-update", source="s", name="tidy"),
    make("progress", job_id="j"),
    make("stopped", reason="reload this page"),
    make("debug_counts", request_id="r"),
    make("debug_counts", request_id="r", trace=True),
    make("online"),
    make("worker_error", message="no wasm", stage="load"),
    make("worker_error", message="Refused to connect", stage="fetch", refused=True),
    make("worker_alive"),
    make("worker_progress", bytes=65_536),
    make("worker_fetched"),
    make("worker_booting"),
    make("worker_attached", index="https://cdn.example/pyodide/"),
    make("worker_preinstalled", record="0" * 64),
    make("abort_run", job_id="j", reason="type 't' suspended"),
    make("suspend_type", job_type="t", request_id="r"),
    make("resume_type", job_type="t", request_id=None),
    make("lease_request"),
    make("lease_granted", epoch=1),
    make("lease_revoked", epoch=1),
    make("lease_released", epoch=1),
    make("lease_steal"),
    make("lease_ping", source="tab2"),
    make("lease_pong", source="tab1"),
    make("lease_stolen", source="tab2"),
]


@pytest.mark.parametrize("message", VALID, ids=[m["type"] for m in VALID])
def test_parse_accepts_a_valid_message_as_it_is(message: dict) -> None:
    assert parse(dict(message)) == message


def test_make_stamps_the_version() -> None:
    assert make("run_started", job_id="j") == {"v": VERSION, "type": "run_started", "job_id": "j"}


def test_make_rejects_an_unknown_type() -> None:
    with pytest.raises(ValueError, match="unknown message type 'explode'"):
        make("explode")


@pytest.mark.parametrize("data,message", [
    (None, "expected an object, got NoneType"),
    ("run", "expected an object, got str"),
    ([make("wake")], "expected an object, got list"),
    ({"type": "wake"}, "protocol version None, this page speaks 1"),
    ({"v": 2, "type": "wake"}, "protocol version 2, this page speaks 1"),
    ({"v": "1", "type": "wake"}, "protocol version '1', this page speaks 1"),
    ({"v": 1, "type": "explode"}, "unknown message type 'explode'"),
    ({"v": 1}, "unknown message type None"),
    ({"v": 1, "type": 5}, "unknown message type 5"),
    ({"v": 1, "type": "run_started"}, "run_started.job_id must be str, got NoneType"),
    ({"v": 1, "type": "run_started", "job_id": 5}, "run_started.job_id must be str, got int"),
    ({"v": 1, "type": "run_checked", "job_id": "j", "claim": "tab1:1"},
     "run_checked.started must be bool, got NoneType"),
    ({"v": 1, "type": "run_started", "job_id": "j"}, "run_started.claim must be str, got NoneType"),
    ({"v": 1, "type": "run_result", "job_id": "j", "ok": "yes"},
     "run_result.ok must be bool, got str"),
    ({"v": 1, "type": "run_result", "job_id": "j", "ok": 1}, "run_result.ok must be bool, got int"),
    ({"v": 1, "type": "run", "job_id": "j", "reconstructor": "f", "job_type": "t", "attempt": True},
     "run.attempt must be int, got True"),
    ({"v": 1, "type": "run", "job_id": "j", "reconstructor": "f", "job_type": "t", "attempt": 1.0},
     "run.attempt must be int, got float"),
    ({"v": 1, "type": "enqueue", "jobs": {}}, "enqueue.jobs must be list, got dict"),
    ({"v": 1, "type": "query_all", "request_id": None},
     "query_all.request_id must be str, got NoneType"),
    ({"v": 1, "type": "ended_jobs", "job_ids": "j", "request_id": "r"},
     "ended_jobs.job_ids must be list, got str"),
    ({"v": 1, "type": "reply", "request_id": "r", "ok": None},
     "reply.ok must be bool, got NoneType"),
    ({"v": 1, "type": "job-update", "jobs": {}, "source": "s"},
     "job-update.jobs must be list, got dict"),
    ({"v": 1, "type": "ready", "source": None}, "ready.source must be str, got NoneType"),
    ({"v": 1, "type": "stopped"}, "stopped.reason must be str, got NoneType"),
    ({"v": 1, "type": "debug_counts", "request_id": "r", "trace": 1},
     "debug_counts.trace must be bool, got int"),
    ({"v": 1, "type": "debug_counts", "trace": True},
     "debug_counts.request_id must be str, got NoneType"),
])
def test_parse_rejects(data: object, message: str) -> None:
    with pytest.raises(BadMessage) as info:
        parse(data)
    assert str(info.value) == message


# ---------------------------------------------------------------- the schema is the one list

def test_every_message_type_says_who_sends_it_and_what_it_says() -> None:
    from pyjobq.core.messages import HOLDER, NEWS, PAGE, SCHEDULER, SCHEMA, WAITING

    for name, kind in SCHEMA.items():
        assert kind.sender in (PAGE, SCHEDULER, NEWS, WAITING, HOLDER), name
        assert kind.doc.strip().endswith("."), name
    assert [name for name, kind in SCHEMA.items() if kind.sender == NEWS] == [
        "job-update", "schedule-update"]


def test_every_message_type_has_a_valid_example_here() -> None:
    from pyjobq.core.messages import SCHEMA

    assert {m["type"] for m in VALID} == set(SCHEMA)


def test_the_docs_table_of_messages_is_the_one_generated_from_the_schema() -> None:
    import re
    import sys
    from pathlib import Path

    from pyjobq.core import messages

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "scripts"))
    import vocab_docs

    assert vocab_docs.stale(root) == [], "run: python scripts/vocab_docs.py"
    text = (root / "docs" / "messages.md").read_text()
    assert re.findall(r"^\| `([a-z_-]+)` \|", text, flags=re.M) == list(messages.SCHEMA)
    # The module's docstring points to the schema instead of listing the types by hand.
    assert messages.__doc__ is not None and "SCHEMA" in messages.__doc__
    assert "``enqueue``, ``wake``" not in messages.__doc__
