"""The page-held lease's messages (pyjobq/engine/lease.py): what parse() accepts and refuses."""

from __future__ import annotations

import pytest

from pyjobq.core.messages import BadMessage, make, parse
from pyjobq.engine.lease import LEASE_MESSAGES


@pytest.mark.parametrize("message", [
    make("lease_request"),
    make("lease_granted", epoch=1),
    make("lease_revoked", epoch=2),
    make("lease_released", epoch=3),
], ids=lambda m: m["type"])
def test_a_lease_message_parses_as_it_is(message: dict) -> None:
    assert parse(dict(message)) == message
    assert message["type"] in LEASE_MESSAGES


@pytest.mark.parametrize("data,error", [
    ({"v": 1, "type": "lease_granted"}, "lease_granted.epoch must be int, got NoneType"),
    ({"v": 1, "type": "lease_granted", "epoch": "1"}, "lease_granted.epoch must be int, got str"),
    ({"v": 1, "type": "lease_revoked", "epoch": True}, "lease_revoked.epoch must be int, got True"),
    ({"v": 1, "type": "lease_released", "epoch": 1.0},
     "lease_released.epoch must be int, got float"),
    ({"v": 2, "type": "lease_request"}, "protocol version 2, this page speaks 1"),
])
def test_a_malformed_lease_message_is_refused(data: object, error: str) -> None:
    with pytest.raises(BadMessage) as info:
        parse(data)
    assert str(info.value) == error
