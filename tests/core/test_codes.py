"""The one table of error codes (pyjobq/core/codes.py): every code pyjobq sets is in it,
explained, and written nowhere else as a literal; docs/troubleshooting.md's table is generated
from it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyjobq
from pyjobq import Code, Outcome, Status
from pyjobq.core import policy, records

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import vocab_docs  # noqa: E402

from source_scan import lines_matching  # noqa: E402  (tests/ is on sys.path)

#: A code written as a string where it is set or compared: ``code="x"``, ``"code": "x"``,
#: ``code == "x"``, ``code or "x"``, ``code = ... else "x"``.
LITERAL = re.compile(r"""\bcode\s*=\s*["']|["']code["']\s*:\s*["']|\bcode\s*[!=]=\s*["']"""
                     r"""|\bcode\s+or\s+["']|\bcode\s*=[^\n]*\belse\s+["']""")


def code_literals() -> dict[str, list[str]]:
    """Each pyjobq source file (but the table) with its lines that write a code as a literal."""
    return lines_matching(LITERAL, skip={"pyjobq/core/codes.py"})


def test_the_literal_pattern_finds_every_way_a_code_is_written() -> None:
    for line in ['code="deleted"', "code = 'x'", '{"ok": False, "code": "abandoned"}',
                 'error.code == "y"',
                 'record.code or "page_gone"', 'code = error.code if ok else "not_stored"']:
        assert LITERAL.search(line), line
    for line in ["code=Code.DELETED", "code=code", 'code=record.get("code")',
                 "code = Code.ORPHANED"]:
        assert not LITERAL.search(line), line


def test_no_code_is_written_as_a_literal_outside_the_table() -> None:
    assert code_literals() == {}


def test_every_code_says_what_it_means_and_what_to_do() -> None:
    for code in Code:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code.value), code
        assert code.meaning.strip() and code.remedy.strip(), code
        assert code.meaning.endswith("."), code
    assert len({code.value for code in Code}) == len(Code)


def test_a_code_is_its_string_wherever_it_goes() -> None:
    assert Code.DELETED == "deleted" and str(Code.DELETED) == "deleted"
    assert f"{Code.DELETED}" == "deleted"
    assert Code("offline") is Code.OFFLINE
    assert json.dumps({"code": Code.PAGE_GONE}) == '{"code": "page_gone"}'
    outcome = Outcome(id="j", status=Status.CANCELLED, code=Code.DELETED)
    assert outcome.code == "deleted"
    assert pyjobq.Code is Code


def test_the_codes_the_core_and_the_errors_set_are_members() -> None:
    assert policy.OFFLINE is Code.OFFLINE
    assert records.MALFORMED is Code.MALFORMED_RECORD
    assert pyjobq.NoTransportError().code is Code.NO_TRANSPORT
    assert pyjobq.OrphanedJobError("r").code is Code.ORPHANED
    assert pyjobq.WorkerUnavailable.not_started("load", "x").code is Code.WORKER_NOT_STARTED


def test_the_troubleshooting_table_is_the_one_generated_from_the_codes() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert vocab_docs.stale(ROOT) == [], "run: python scripts/vocab_docs.py"
    for code in Code:
        assert f"| `{code.value}` | {code.meaning} | {code.remedy} |" in text
