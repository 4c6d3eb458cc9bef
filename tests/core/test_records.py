"""NewJob validation, the stored JobRecord's decoding, and what a job-update carries."""

from __future__ import annotations

import math

import pytest

from pyjobq.core.outcome import Outcome
from pyjobq.core.records import JobRecord, NewJob, RecordError
from pyjobq.core.status import Status
from pyjobq.errors import InvalidJobError, PyjobqError

T0 = 1_000.0


def new(**kw: object) -> NewJob:
    args: dict[str, object] = dict(id="j1", reconstructor="fetch", params={"path": "/a"})
    args.update(kw)
    return NewJob(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw,message", [
    (dict(max_attempts=0), "max_attempts must be an int >= 1, got 0"),
    (dict(max_attempts=-1), "max_attempts must be an int >= 1, got -1"),
    (dict(max_attempts=2.5), "max_attempts must be an int >= 1, got 2.5"),
    (dict(max_attempts=True), "max_attempts must be an int >= 1, got True"),
    (dict(delay_ms=-1), "delay_ms must be a finite number >= 0, got -1"),
    (dict(delay_ms=math.nan), "delay_ms must be a finite number >= 0, got nan"),
    (dict(delay_ms=math.inf), "delay_ms must be a finite number >= 0, got inf"),
    (dict(delay_ms="5"), "delay_ms must be a finite number >= 0, got '5'"),
    (dict(type=""), "type must be a non-empty str, got ''"),
    (dict(type=None), "type must be a non-empty str, got None"),
    (dict(type=5), "type must be a non-empty str, got 5"),
    (dict(id=""), "id must be a non-empty str, got ''"),
    (dict(reconstructor=""),
     "reconstructor must be a non-empty str naming a registered factory, got ''"),
    (dict(group=3), "group must be a str or None, got 3"),
    (dict(group=["doc"]), "group must be a str or None, got ['doc']"),
    (dict(label=3), "label must be a str or None, got 3"),
])
def test_new_job_rejects_bad_arguments(kw: dict, message: str) -> None:
    with pytest.raises(InvalidJobError) as info:
        new(**kw)
    assert str(info.value) == message


@pytest.mark.parametrize("params", [{"f": object()}, {1, 2}, {"x": math.nan}, b"bytes"])
def test_new_job_rejects_params_that_are_not_json(params: object) -> None:
    with pytest.raises(InvalidJobError,
                       match=r"^the job's params must be JSON-like .* so it can be stored"):
        new(params=params)


def test_invalid_job_error_is_a_value_error_and_a_pyjobq_error() -> None:
    assert issubclass(InvalidJobError, ValueError) and issubclass(InvalidJobError, PyjobqError)


def test_new_job_to_record() -> None:
    record = new(type="t", group="g", label="L", max_attempts=3, delay_ms=250).to_record(T0)
    assert record == JobRecord(
        id="j1", type="t", group="g", label="L", status=Status.PENDING, attempts=0, max_attempts=3,
        created_at=T0, updated_at=T0, next_retry_at=T0 + 250, _reconstructor="fetch",
        _params={"path": "/a"})


def test_new_job_message_round_trip() -> None:
    job = new(type="t", delay_ms=5)
    assert NewJob.from_message(job.to_message()) == job


def test_new_job_from_message_with_unknown_field_shape() -> None:
    with pytest.raises(InvalidJobError, match="malformed job"):
        NewJob.from_message({"reconstructor": "fetch"})


def record_dict() -> dict:
    return new(group="g").to_record(T0).to_dict()


def test_to_dict_is_flat_json_with_status_as_a_string() -> None:
    assert record_dict() == {
        "id": "j1", "type": "default", "status": "pending", "attempts": 0, "max_attempts": 5,
        "created_at": T0, "updated_at": T0, "_reconstructor": "fetch", "_params": {"path": "/a"},
        "group": "g", "label": None, "next_retry_at": T0, "result": None, "error": None,
        "http_status": None, "code": None, "given_back": 0, "cut_short": 0, "yield_lock": None,
        "owner": None, "key": None, "timeout_ms": None, "unauthorized_since": None,
    }


def test_round_trip() -> None:
    record = new(group="g").to_record(T0).evolve(status=Status.FAILED, attempts=2, error="x",
                                                 http_status=409, code="conflict", result=[1, 2],
                                                 owner=None)
    assert JobRecord.from_dict(record.to_dict()) == record


def test_from_dict_accepts_floats_for_counts_as_javascript_stores_them() -> None:
    data = {**record_dict(), "attempts": 2.0, "max_attempts": 5.0, "http_status": 500.0}
    record = JobRecord.from_dict(data)
    assert (record.attempts, record.max_attempts, record.http_status) == (2, 5, 500)
    assert type(record.attempts) is int


def test_from_dict_fills_optional_fields() -> None:
    minimal = {k: v for k, v in record_dict().items()
               if k in ("id", "type", "status", "attempts", "max_attempts", "created_at",
                        "updated_at", "_reconstructor", "_params")}
    assert JobRecord.from_dict(minimal) == new().to_record(T0).evolve(next_retry_at=None)


@pytest.mark.parametrize("field", ["id", "type", "status", "attempts", "max_attempts", "created_at",
                                   "updated_at", "_reconstructor", "_params"])
def test_from_dict_rejects_a_missing_field(field: str) -> None:
    data = record_dict()
    del data[field]
    with pytest.raises(RecordError) as info:
        JobRecord.from_dict(data)
    assert field in str(info.value) and "missing" in str(info.value)


@pytest.mark.parametrize("field,value", [
    ("id", 5), ("type", None), ("attempts", "1"), ("attempts", True), ("max_attempts", None),
    ("created_at", "yesterday"), ("updated_at", None), ("_reconstructor", 1), ("group", 7),
    ("next_retry_at", "soon"), ("error", 1), ("http_status", "500"), ("owner", 1),
    ("yield_lock", []),
])
def test_from_dict_rejects_a_mistyped_field(field: str, value: object) -> None:
    with pytest.raises(RecordError) as info:
        JobRecord.from_dict({**record_dict(), field: value})
    assert f"has {field}={value!r}, expected" in str(info.value)


def test_from_dict_rejects_an_unknown_status() -> None:
    with pytest.raises(RecordError, match="unknown status 'sleeping'"):
        JobRecord.from_dict({**record_dict(), "status": "sleeping"})


@pytest.mark.parametrize("value", [None, [], "record", 3])
def test_from_dict_rejects_a_non_object(value: object) -> None:
    with pytest.raises(RecordError, match="must be an object"):
        JobRecord.from_dict(value)


def test_from_dict_ignores_unknown_keys() -> None:
    assert JobRecord.from_dict({**record_dict(), "future_field": 1}) == (
        JobRecord.from_dict(record_dict()))


def test_summary_excludes_params_only() -> None:
    record = new().to_record(T0)
    expected = record.to_dict()
    del expected["_params"]
    assert record.summary() == expected
    assert "_params" not in record.summary()


def test_terminal_property() -> None:
    record = new().to_record(T0)
    assert [record.evolve(status=s).terminal for s in Status] == [
        False, False, False, True, True, True]


def test_outcome_of_a_record() -> None:
    data = {**record_dict(), "status": "failed", "error": "no", "http_status": 403,
            "code": "forbidden"}
    assert Outcome.of(data) == Outcome(id="j1", status="failed", result=None, error="no",
                                       http_status=403, code="forbidden")
