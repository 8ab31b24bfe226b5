"""llm-d demand-driven revocation (flow_control.revocation; llm-d PR #2249) over real HTTP on loopback: a
priority-10 request blocked by a saturated pool revokes running priority -1 requests, youngest first, one per
blocked request not covered by a pending revocation; the victims' clients, the ledger and /metrics agree."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from test_testbed_http_llmd import OBJ, wait_until
from testbed_helpers import Running, chat, post, running, tiny

from rushhour.testbed.config import ConfigError
from rushhour.testbed.flow import REVOKE_CONFIRMED, REVOKE_TIMED_OUT, Revocations
from rushhour.testbed.job import Job

OBJECTIVES = {"premium": 10, "standard": 0, "batch": -1}
BATCH = {OBJ: "batch"}  # priority -1: sheddable
PREMIUM = {OBJ: "premium"}  # priority 10


def _cfg(revocation: bool) -> dict[str, Any]:
    # the pool is not saturated until _two_sheddable makes it so
    return {"speed": 1.0, "max_num_seqs": 2,
            "flow_control": {"objectives": OBJECTIVES, "queue_depth_threshold": 100.0,
                             "kv_cache_util_threshold": 1.0, "revocation": revocation}}


def _running_ids(r: Running) -> set[str]:
    return {j.rid for rep in r.server.stack.engine.replicas for j in rep.running}


async def _two_sheddable(r: Running) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """An older batch stream and a younger batch non-stream request, both running; then a saturated pool."""
    a = asyncio.create_task(post(r, "/v1/chat/completions", chat(stream=True, max_tokens=300),
                                 {**BATCH, "x-request-id": "old-stream"}))
    await wait_until(lambda: _running_ids(r) == {"old-stream"})
    b = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=300),
                                 {**BATCH, "x-request-id": "young-json"}))
    await wait_until(lambda: _running_ids(r) == {"old-stream", "young-json"})
    engine = r.server.stack.engine
    engine.kv_threshold = 1e-6  # any KV in use now saturates the pool: later arrivals wait at the gateway
    await wait_until(lambda: engine.saturation() >= 1.0)
    return a, b


def _sample(metrics: str, name: str, labels: str = "") -> float:
    """The value of one exposition line ``name{labels} value`` (labels as written, in order)."""
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else r"(\{[^}]*\})?") + r" (\S+)$"
    found = [float(m.group(m.lastindex or 0)) for m in re.finditer(pattern, metrics, re.MULTILINE)]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.mark.serial  # the victims must still be running when the priority-10 request arrives
def test_blocked_priority_10_revokes_running_sheddable_youngest_first() -> None:
    async def go() -> None:
        async with running(tiny(**_cfg(True))) as r:
            a, b = await _two_sheddable(r)
            stack = r.server.stack
            assert stack.revocations is not None and stack.flow is not None
            t0 = time.monotonic()
            c = await post(r, "/v1/chat/completions", chat(max_tokens=3), {**PREMIUM, "x-request-id": "p10"})
            assert c.status == 200
            ares, bres = await a, await b
            assert time.monotonic() - t0 < 5.0  # long before 300 tokens of batch work could end
            # the younger victim had sent nothing: the EPP's ImmediateResponse 429 with TerminationCause evicted
            assert bres.status == 429 and bres.text == "request evicted by flow control"
            assert bres.headers["x-llm-d-request-dropped-reason"] == "evicted"
            # the older one was streaming: its 200 was out, so the stream is cut (no [DONE], no finish)
            assert ares.status == 200 and ares.broken and "[DONE]" not in ares.text
            assert '"finish_reason":"length"' not in ares.text and '"finish_reason": "length"' not in ares.text
            await wait_until(lambda: not r.server.live)
            led = r.by_id()
            for rid, status in (("young-json", 429), ("old-stream", 200)):
                assert led[rid]["outcome"] == "preempted" and led[rid]["reason"] == "evicted", led[rid]
                assert led[rid]["status"] == status and led[rid]["priority"] == -1
                assert led[rid]["output_tokens"] < 300
            # youngest first: the non-streaming request (arrived second) was revoked before the older stream
            assert led["young-json"]["end_ns"] <= led["old-stream"]["end_ns"]
            assert led["p10"]["outcome"] == "served" and led["p10"]["priority"] == 10
            await wait_until(lambda: stack.revocations is not None and not stack.revocations.pending)
            m = await (await r.session.get(r.url + "/metrics")).text()
            pool = 'inference_pool="testbed-pool"'
            assert _sample(m, "llm_d_epp_flow_control_revocations_issued_total", f'{pool},priority="-1"') == 2.0
            assert "llm_d_epp_flow_control_revocations_issued_total{" + pool + ',priority="10"' not in m
            assert _sample(m, "llm_d_epp_flow_control_revocations_total", f'{pool},outcome="confirmed"') == 2.0
            assert _sample(m, "llm_d_epp_flow_control_revocations_total", f'{pool},outcome="timed_out"') == 0.0
            assert _sample(m, "llm_d_epp_flow_control_reclaim_target", pool) == 0.0
            assert _sample(m, "llm_d_epp_flow_control_pending_reclaim", pool) == 0.0
            hist = "llm_d_epp_flow_control_revocation_confirmation_seconds"
            assert _sample(m, hist + "_count", pool) == 2.0
            assert _sample(m, hist + "_bucket", f'{pool},le="+Inf"') == 2.0
            assert 0.0 <= _sample(m, hist + "_sum", pool) < 5.0
            assert "# TYPE llm_d_epp_flow_control_revocations_issued_total counter" in m
            assert "# TYPE llm_d_epp_flow_control_reclaim_target gauge" in m
            assert f"# TYPE {hist} histogram" in m
            # no EvictedOther: a revoked request was Dispatched, the revocation counters count it
            assert 'outcome="EvictedOther"' not in m
            assert _sample(m, "llm_d_epp_flow_control_requests_total",
                           f'{pool},priority="-1",outcome="Dispatched"') == 2.0

    asyncio.run(go())


@pytest.mark.serial  # the waiting request must not finish while the batch work still runs
def test_without_revocation_the_blocked_request_waits_and_no_counter_is_exported() -> None:
    async def go() -> None:
        async with running(tiny(**_cfg(False))) as r:
            a, b = await _two_sheddable(r)
            c = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=3),
                                         {**PREMIUM, "x-request-id": "p10"}))
            await wait_until(lambda: r.server.stack.flow is not None and r.server.stack.flow.count == 1)
            await asyncio.sleep(0.2)
            assert not c.done() and _running_ids(r) == {"old-stream", "young-json"}
            m = await (await r.session.get(r.url + "/metrics")).text()
            assert "revocation" not in m and "reclaim" not in m
            for t in (a, b, c):
                t.cancel()
            await asyncio.gather(a, b, c, return_exceptions=True)

    asyncio.run(go())


@pytest.mark.serial
def test_a_blocked_sheddable_request_revokes_nothing() -> None:
    """Only demand of priority >= 0 revokes: a blocked priority -1 request waits like any other."""
    async def go() -> None:
        async with running(tiny(**_cfg(True))) as r:
            a, b = await _two_sheddable(r)
            c = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=3),
                                         {**BATCH, "x-request-id": "late-batch"}))
            await wait_until(lambda: r.server.stack.flow is not None and r.server.stack.flow.count == 1)
            await asyncio.sleep(0.2)
            rv = r.server.stack.revocations
            assert rv is not None and not rv.issued and rv.reclaim_target == 0
            assert _running_ids(r) == {"old-stream", "young-json"}
            for t in (a, b, c):
                t.cancel()
            await asyncio.gather(a, b, c, return_exceptions=True)

    asyncio.run(go())


def test_revocations_confirm_on_the_next_step_or_time_out() -> None:
    rv = Revocations(timeout_ns=1_000)
    assert rv.demand(3) == 3 and rv.reclaim_target == 3
    rv.issue(Job("x", 0, 1, 1, priority=-1), now=0, replica=0, step=5)
    rv.issue(Job("y", 0, 1, 1, priority=-2), now=0, replica=1, step=7)
    assert rv.demand(3) == 1  # pending revocations cover part of the demand
    steps = {0: 5, 1: 7}
    rv.settle(500, lambda i: steps[i])  # neither replica stepped yet
    assert len(rv.pending) == 2
    steps[0] = 6
    rv.settle(600, lambda i: steps[i])
    assert rv.outcomes[REVOKE_CONFIRMED] == 1 and rv.confirm_count == 1 and len(rv.pending) == 1
    rv.settle(1_000, lambda i: None)  # replica 1 went down: never confirmed
    assert rv.outcomes == {REVOKE_CONFIRMED: 1, REVOKE_TIMED_OUT: 1} and not rv.pending
    assert dict(rv.issued) == {-1: 1, -2: 1}
    assert rv.buckets[0] == 1 and rv.confirm_sum_s == pytest.approx(600e-9)


def test_revocation_and_eviction_exclude_each_other() -> None:
    with pytest.raises(ConfigError, match=r"flow_control\.revocation"):
        tiny(flow_control={"revocation": True, "enable_eviction": True})
    with pytest.raises(ConfigError, match="revocation_timeout_s"):
        tiny(flow_control={"revocation": True, "revocation_timeout_s": 0})
