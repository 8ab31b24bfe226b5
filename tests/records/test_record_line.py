"""A record line is ``json.dumps(fields, separators=(",", ":"), ensure_ascii=False)``, whoever writes it.

``to_json_line`` hands plain values to orjson (about 20× faster); these tests prove that the bytes are the
ones ``json.dumps`` writes: every code point in a string, the floats it lets through, and whole records
(texts sanitised, a password in the endpoint, per-token times, values it must leave to ``json.dumps``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from typing import Any

import orjson
import pytest

from rushhour.records import schema
from rushhour.records.record import (
    EventRecord,
    HealthRecord,
    Record,
    RequestRecord,
    TaskRecord,
    register_secret,
    short_text,
    strip_userinfo,
    to_json_line,
)


def reference_line(record: Record) -> bytes:
    """The line as it was written before orjson (records/record.py at 0d52645)."""
    data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    for name in schema._TEXT_FIELDS:
        value = data.get(name)
        if isinstance(value, str):
            data[name] = short_text(value)
    if isinstance(data.get("endpoint"), str):
        data["endpoint"] = strip_userinfo(data["endpoint"])
    if data.get("token_ns") is None:
        data.pop("token_ns", None)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def test_orjson_escapes_every_code_point_as_json_dumps() -> None:
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    for i in range(0, len(cps), 2048):
        s = "".join(map(chr, cps[i : i + 2048])) + '"\\'
        assert orjson.dumps(s) == json.dumps(s, ensure_ascii=False).encode()


def test_the_floats_let_through_are_written_alike() -> None:
    rng = random.Random(3)
    checked = 0
    for _ in range(200_000):
        x = math.ldexp(rng.random() + 0.5, rng.randint(-40, 60)) * rng.choice((1, -1))
        if schema._same_as_json([x]):
            assert orjson.dumps(x) == json.dumps(x).encode(), x
            checked += 1
        else:
            assert not (1e-4 <= abs(x) < 1e16)
    for x in (0.0, -0.0, 1e-4, 0.1, 1.0, 2.5, 60.0, 9999999999999998.0, 0.30000000000000004):
        assert schema._same_as_json([x]) and orjson.dumps(x) == json.dumps(x).encode()
    assert checked > 100_000
    for x in (math.nan, math.inf, -math.inf, 1e-5, 9.999e-05, 1e16):
        assert not schema._same_as_json([x])


def _request(**facts: Any) -> RequestRecord:
    return RequestRecord(run_id="r", seq=3, request_id="a" * 32, logical_id="b" * 32, tier="t", tenant="x",
                         persona="p", **facts)


@pytest.mark.parametrize("record", [
    _request(),
    _request(status=429, reason="rejected-saturated", error="queue at capacity \x00\x07 ünïcode ✓ \u2028",
             retry_after_s=2.5, endpoint="http://user:hunter2@127.0.0.1:8000/v1", token_ns=[1, 2, 3]),
    _request(error="x" * 5000, in_band_error="Bearer abcdefghijklmnop12345", retry_after_s=1e-5),
    _request(retry_after_s=math.nan, sent_ns=2**70),  # left to json.dumps (NaN, a 71-bit int)
    _request(error='quotes " and \\ and \n newlines', service_tier="flex", prompt_bytes=True),
    TaskRecord(run_id="r", seq=1, task_id="t", persona="p", tier="a", tenant="b", first_failure="sk-" + "z" * 20),
    HealthRecord(run_id="r", seq=2, ts_ns=5, loop_lag_ns=7, cpu_percent=12.5),
    HealthRecord(run_id="r", seq=2, ts_ns=5, loop_lag_ns=7, cpu_percent=1e-7),
    EventRecord(run_id="r", seq=4, ts_ns=9, name="shortfall", detail={"interval_s": 1.25, "missed": 3}),
])
def test_lines_are_the_json_dumps_lines(record: Record) -> None:
    assert to_json_line(record) == reference_line(record)
    assert to_json_line(record) == reference_line(record)  # the remembered texts too


def test_a_secret_registered_after_a_text_was_remembered_is_still_redacted() -> None:
    secret = "zq" + "9" * 10 + "kw7"
    record = _request(error=f"upstream said {secret}")
    assert secret in to_json_line(record).decode()  # not shaped like a key: kept until registered
    register_secret(secret)
    assert secret not in to_json_line(record).decode()
    assert to_json_line(record) == reference_line(record)
