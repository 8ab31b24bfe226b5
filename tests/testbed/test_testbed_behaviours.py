"""Profile behaviours over real HTTP (stacks.md): llm-d eviction and legacy admission, SGLang running
preemption, Anthropic rate limits."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from typing import Any

import pytest
from test_testbed_http_llmd import OBJ, wait_until
from testbed_helpers import Running, chat, post, running, tiny

BATCH = {OBJ: "batch"}  # priority -1: sheddable
INTERACTIVE = {OBJ: "interactive"}  # priority 100


def _live(r: Running, rid: str) -> bool:
    return any(ex.rec.request_id == rid for ex in r.server.live)


def _running_ids(r: Running) -> set[str]:
    return {j.rid for rep in r.server.stack.engine.replicas for j in rep.running}


# ---- llm-d enableEviction ------------------------------------------------------------------------
def _eviction_cfg(evict: bool) -> dict[str, Any]:
    # the pool is not saturated until _two_sheddable makes it so (see there)
    return {"speed": 1.0, "max_num_seqs": 2,
            "flow_control": {"queue_depth_threshold": 100.0, "kv_cache_util_threshold": 1.0,
                             "enable_eviction": evict}}


async def _two_sheddable(r: Running) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """A batch stream and a batch non-stream request, both dispatched and running; then a saturated pool.

    The KV threshold drops to almost nothing only once both run: set from the start, the first request's
    KV use could saturate the pool before the second arrived, which then waited at the gateway instead
    of running (a race a busy machine lost now and then)."""
    a = asyncio.create_task(post(r, "/v1/chat/completions", chat(stream=True, max_tokens=300),
                                 {**BATCH, "x-request-id": "a-stream"}))
    b = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=300),
                                 {**BATCH, "x-request-id": "b-json"}))
    await wait_until(lambda: _running_ids(r) == {"a-stream", "b-json"})
    engine = r.server.stack.engine
    engine.kv_threshold = 1e-6  # any KV in use now saturates the pool: later arrivals wait at the gateway
    await wait_until(lambda: engine.saturation() >= 1.0)  # a running request holds KV from its first step
    return a, b


@pytest.mark.serial  # the victims must still be running when the interactive request arrives
def test_llmd_eviction_kills_inflight_sheddable_for_blocked_higher_band() -> None:
    async def go() -> None:
        async with running(tiny(**_eviction_cfg(True))) as r:
            a, b = await _two_sheddable(r)
            t0 = time.monotonic()
            c = await post(r, "/v1/chat/completions", chat(max_tokens=3), {**INTERACTIVE, "x-request-id": "c"})
            assert c.status == 200
            ares, bres = await a, await b
            # before the 300-token batch work could end (the ledger's output_tokens < 300 below is the proof;
            # this bound is generous so that a busy machine does not fail it)
            assert time.monotonic() - t0 < 5.0
            # non-streaming victim: the EPP's ImmediateResponse
            assert bres.status == 429 and bres.text == "request evicted by flow control"
            assert bres.headers["x-llm-d-request-dropped-reason"] == "evicted"
            # streaming victim: the 200 was out, so the stream is reset mid-body
            assert ares.status == 200 and ares.broken and "[DONE]" not in ares.text
            await wait_until(lambda: not r.server.live)
            led = r.by_id()
            assert led["b-json"]["outcome"] == "preempted" and led["b-json"]["reason"] == "evicted"
            assert led["b-json"]["status"] == 429
            assert led["a-stream"]["outcome"] == "preempted" and led["a-stream"]["reason"] == "evicted"
            assert led["a-stream"]["status"] == 200 and led["a-stream"]["output_tokens"] < 300
            assert led["c"]["outcome"] == "served" and led["c"]["priority"] == 100
            metrics = await (await r.session.get(r.url + "/metrics")).text()
            assert 'priority="-1",outcome="EvictedOther"} 2.0' in metrics

    asyncio.run(go())


@pytest.mark.serial  # the waiting request must not finish while the batch work still runs
def test_llmd_without_eviction_the_higher_band_waits() -> None:
    async def go() -> None:
        async with running(tiny(**_eviction_cfg(False))) as r:
            a, b = await _two_sheddable(r)
            c = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=3),
                                         {**INTERACTIVE, "x-request-id": "c"}))
            await wait_until(lambda: r.server.stack.flow is not None and r.server.stack.flow.count == 1)
            await asyncio.sleep(0.2)
            assert not c.done() and _running_ids(r) == {"a-stream", "b-json"}
            for t in (a, b, c):
                t.cancel()
            await asyncio.gather(a, b, c, return_exceptions=True)

    asyncio.run(go())


# ---- llm-d legacy admission (flowControl gate off) ------------------------------------------------
def test_llmd_legacy_admission_sheds_sheddable_when_saturated() -> None:
    async def go() -> None:
        cfg = tiny(speed=1.0, max_num_seqs=1, flow_control={"enabled": False, "queue_depth_threshold": 1.0})
        async with running(cfg) as r:
            assert r.server.stack.flow is None
            blockers = [asyncio.create_task(post(r, "/v1/chat/completions", chat(stream=True, max_tokens=300),
                                                 {"x-request-id": f"blk{i}"})) for i in range(2)]
            eng = r.server.stack.engine
            await wait_until(lambda: len(eng.replicas[0].running) == 1 and eng.replicas[0].n_waiting == 1)
            assert eng.saturation() >= 1.0
            shed = await post(r, "/v1/chat/completions", chat(), {**BATCH, "x-request-id": "shed"})
            assert shed.status == 429
            assert shed.text == "inference error: ResourceExhausted - system saturated, sheddable request dropped"
            assert "x-llm-d-request-dropped-reason" not in shed.headers
            # non-sheddable work is never queued at the gateway: it goes straight to a model server
            std = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=2),
                                           {"x-request-id": "std"}))
            await wait_until(lambda: eng.replicas[0].n_waiting == 2)
            metrics = await (await r.session.get(r.url + "/metrics")).text()
            assert "llm_d_epp_flow_control_queue_size{" not in metrics
            for t in [*blockers, std]:
                t.cancel()
            await asyncio.gather(*blockers, std, return_exceptions=True)
            await wait_until(lambda: not r.server.live)
            rec = r.by_id()["shed"]
            assert rec["outcome"] == "shed" and rec["status"] == 429 and rec["priority"] == -1
            assert rec["dispatch_ns"] is None
        # below saturation a sheddable request is served; an empty pool is the no-candidates 503
        async with running(tiny(flow_control={"enabled": False})) as r:
            ok = await post(r, "/v1/chat/completions", chat(max_tokens=2), BATCH)
            assert ok.status == 200
        async with running(tiny(flow_control={"enabled": False}, warmup_s=60)) as r:
            res = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "cold"})
            assert res.status == 503 and res.text == ("inference error: ServiceUnavailable - failed to find "
                                                      "endpoint candidates for serving the request")
            assert "x-llm-d-request-dropped-reason" not in res.headers
            assert r.by_id()["cold"]["outcome"] == "overloaded"

    asyncio.run(go())


# ---- SGLang priority preemption of running requests -------------------------------------------------
async def _sglang_case(high_priority: int, **sg: Any) -> dict[str, dict[str, Any]]:
    cfg = tiny(profile="sglang", speed=1.0, max_num_seqs=2, sglang=sg)
    async with running(cfg) as r:
        lows = [asyncio.create_task(post(r, "/v1/chat/completions", chat(stream=True, max_tokens=150, priority=0),
                                         {"x-request-id": f"low{i}"})) for i in range(2)]
        await wait_until(lambda: _running_ids(r) == {"low0", "low1"})
        hi = await post(r, "/v1/chat/completions", chat(stream=True, max_tokens=3, priority=high_priority),
                        {"x-request-id": "hi"})
        assert hi.status == 200 and hi.events()[-1] == "[DONE]"
        for res in await asyncio.gather(*lows):
            assert res.status == 200 and res.events()[-1] == "[DONE]"  # a victim is delayed, never failed
        await wait_until(lambda: not r.server.live)
        return r.by_id()


def test_sglang_preempts_running_lower_priority_beyond_threshold() -> None:
    async def go() -> None:
        led = await _sglang_case(11)  # gap 11 > threshold 10
        victims = [led[f"low{i}"] for i in range(2) if led[f"low{i}"]["preemptions"]]
        assert len(victims) == 1
        v = victims[0]
        assert v["outcome"] == "served" and v["output_tokens"] == 150 and v["in_band_error"] is False
        # the high-priority request finished while both low ones were still running
        assert led["hi"]["end_ns"] < min(led[f"low{i}"]["end_ns"] for i in range(2))
        # a gap of exactly the threshold, or preemption disabled: the high request waits for a slot
        for led2 in (await _sglang_case(10), await _sglang_case(50, disable_priority_preemption=True)):
            assert all(led2[f"low{i}"]["preemptions"] == 0 for i in range(2))
            assert led2["hi"]["end_ns"] > min(led2[f"low{i}"]["end_ns"] for i in range(2))
        led3 = await _sglang_case(3, priority_scheduling_preemption_threshold=2)
        assert sum(led3[f"low{i}"]["preemptions"] for i in range(2)) == 1

    asyncio.run(go())


# ---- Anthropic rate limits -------------------------------------------------------------------------
def test_anthropic_ratelimit_headers_and_rpm_429() -> None:
    async def go() -> None:
        cfg = tiny(profile="anthropic", speed=1.0, anthropic={"rpm_limit": 2})
        async with running(cfg) as r:
            body = {"model": "testbed", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
            key = {"x-api-key": "sk-ant-a"}
            seen = []
            for i in range(2):
                res = await post(r, "/v1/messages", body, {**key, "x-request-id": f"ok{i}"})
                assert res.status == 200
                seen.append(res.headers)
            assert [h["anthropic-ratelimit-requests-limit"] for h in seen] == ["2", "2"]
            assert [h["anthropic-ratelimit-requests-remaining"] for h in seen] == ["1", "0"]
            reset = seen[1]["anthropic-ratelimit-requests-reset"]
            assert reset.endswith("Z")
            dt = datetime.fromisoformat(reset.replace("Z", "+00:00"))
            assert 0 <= dt.timestamp() - time.time() <= 61
            lim = await post(r, "/v1/messages", body, {**key, "x-request-id": "limited"})
            assert lim.status == 429
            err = json.loads(lim.text)
            assert err["type"] == "error" and err["error"]["type"] == "rate_limit_error"
            assert err["request_id"] == "limited"
            assert 1 <= int(lim.headers["retry-after"]) <= 60
            assert lim.headers["anthropic-ratelimit-requests-remaining"] == "0"
            other = await post(r, "/v1/messages", body, {"x-api-key": "sk-ant-b"})
            assert other.status == 200 and other.headers["anthropic-ratelimit-requests-remaining"] == "1"
            led = r.by_id()
            assert led["limited"]["outcome"] == "rate_limited" and led["limited"]["status"] == 429
            assert led["ok1"]["outcome"] == "served"
        # without a limit the headers still advertise one
        async with running(tiny(profile="anthropic")) as r:
            body = {"model": "testbed", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
            res = await post(r, "/v1/messages", body)
            assert res.headers["anthropic-ratelimit-requests-limit"] == "10000"

    asyncio.run(go())


# ---- the shared step scheduler ---------------------------------------------------------------------
def test_scheduler_many_streams_exact_tokens_and_stats() -> None:
    async def go() -> None:
        async with running(tiny(replicas=3, speed=5.0, max_num_seqs=8)) as r:
            await (await r.session.post(r.url + "/admin/stats/reset")).json()
            res = await asyncio.gather(*[
                post(r, "/v1/chat/completions", chat(f"s{i}", stream=True, max_tokens=5 + i % 7),
                     {"x-request-id": f"s{i}"}) for i in range(40)])
            for i, x in enumerate(res):
                ev = x.events()
                assert x.status == 200 and ev[-1] == "[DONE]"
                assert sum('"content":"word "' in e for e in ev) == 5 + i % 7
                assert json.loads(ev[-2])["usage"]["completion_tokens"] == 5 + i % 7
            led = r.by_id()
            assert all(led[f"s{i}"]["outcome"] == "served" and led[f"s{i}"]["output_tokens"] == 5 + i % 7
                       for i in range(40))
            assert {led[f"s{i}"]["replica"] for i in range(40)} == {0, 1, 2}
            stats = await (await r.session.get(r.url + "/admin/stats")).json()
            assert stats["lag_samples"] > 0 and stats["steps"] > 0
            assert 0.0 <= stats["lag_p50_s"] <= stats["lag_p99_s"] <= stats["lag_max_s"]
            assert 0.0 <= stats["write_lag_p50_s"] <= stats["write_lag_p99_s"] <= stats["write_lag_max_s"]

    asyncio.run(go())
