"""llm-d / gaie-v1 profiles over real HTTP: bodies, headers, flow-control drops, faults, bad input."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from testbed_helpers import Running, chat, post, running, tiny

OBJ = "x-llm-d-inference-objective"


async def wait_until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll server state (no fixed sleeps); the deadline is generous so a busy machine does not fail it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.005)
    if not pred():
        raise AssertionError("condition not reached")


def gated(**fc: Any) -> dict[str, Any]:
    """One slow replica with one slot; the gate closes as soon as one request waits on it."""
    flow = {"queue_depth_threshold": 1.0, **fc}
    return {"speed": 1.0, "max_num_seqs": 1, "flow_control": flow}


def test_stream_and_json_served() -> None:
    async def go() -> None:
        async with running(tiny()) as r:
            res = await post(r, "/v1/chat/completions", chat(stream=True, max_tokens=5), {"x-request-id": "s1"})
            assert res.status == 200 and res.headers["x-request-id"] == "s1"
            ev = res.events()
            assert ev[-1] == "[DONE]"
            usage = json.loads(ev[-2])
            assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
            assert usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            assert sum('"content":"word "' in e for e in ev) == 5
            res = await post(r, "/v1/completions", {"model": "testbed", "prompt": "hi", "max_tokens": 2},
                             {"x-request-id": "j1"})
            body = json.loads(res.text)
            assert body["choices"][0]["text"] == "word word " and body["usage"]["completion_tokens"] == 2
            led = r.by_id()
            s1 = led["s1"]
            assert s1["outcome"] == "served" and s1["output_tokens"] == 5 and s1["status"] == 200
            assert s1["arrival_ns"] <= s1["dispatch_ns"] <= s1["first_token_ns"] <= s1["end_ns"]
            assert led["j1"]["outcome"] == "served" and led["j1"]["stream"] is False
            models = await (await r.session.get(r.url + "/v1/models")).json()
            assert models["data"][0]["id"] == "testbed"
            assert (await r.session.get(r.url + "/health")).status == 200

    asyncio.run(go())


def test_prefix_cache_reported_in_usage() -> None:
    async def go() -> None:
        async with running(tiny()) as r:
            prefix = "You are an agent. " * 40
            await post(r, "/v1/chat/completions", chat(prefix + "step 1", stream=True))
            res = await post(r, "/v1/chat/completions", chat(prefix + "step 2", stream=True),
                             {"x-request-id": "second"})
            cached = json.loads(res.events()[-2])["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached > 100 and r.by_id()["second"]["cached_tokens"] == cached
            metrics = await (await r.session.get(r.url + "/metrics")).text()
            assert 'vllm:prefix_cache_hits_total{model_name="testbed",engine="0"} ' + f"{cached}.0" in metrics

    asyncio.run(go())


async def _fill(r: Running, n_queued: int, tokens: int = 400) -> list[asyncio.Task[Any]]:
    """One running + one waiting on the replica, then n_queued in the EPP band 0."""
    tasks = []
    stack = r.server.stack
    for i in range(2 + n_queued):
        tasks.append(asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=tokens, stream=True),
                                              {"x-request-id": f"fill{i}"})))
        want = i + 1
        await wait_until(lambda w=want: len(r.server.live) >= w and (  # type: ignore[misc]
            stack.flow is not None and stack.flow.count + sum(
                rep.n_waiting + len(rep.running) for rep in stack.engine.replicas) >= w))
    return tasks


def test_queue_full_is_429_rejected_saturated() -> None:
    async def go() -> None:
        async with running(tiny(**gated(band_max_requests=1))) as r:
            tasks = await _fill(r, 1)
            res = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "full"})
            assert res.status == 429
            assert res.text == "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
            assert res.headers["x-llm-d-request-dropped-reason"] == "rejected-saturated"
            # a higher band has its own capacity
            hi = asyncio.create_task(post(r, "/v1/chat/completions", chat(), {OBJ: "interactive"}))
            await wait_until(lambda: r.server.stack.flow.queue_sizes().get(100) == 1)  # type: ignore[union-attr]
            metrics = await (await r.session.get(r.url + "/metrics")).text()
            assert 'llm_d_epp_flow_control_requests_total{inference_pool="testbed-pool",priority="0",' \
                   'outcome="RejectedCapacity"} 1.0' in metrics
            assert 'llm_d_epp_flow_control_queue_size{inference_pool="testbed-pool",priority="100"} 1.0' in metrics
            for t in [*tasks, hi]:
                t.cancel()
            await asyncio.gather(*tasks, hi, return_exceptions=True)
            await wait_until(lambda: not r.server.live)
            rec = r.by_id()["full"]
            assert rec["outcome"] == "queue_full" and rec["reason"] == "rejected-saturated"
            assert rec["dispatch_ns"] is None and rec["replica"] is None

    asyncio.run(go())


def test_ttl_expiry_llmd_429_and_gaie_503() -> None:
    async def one(profile: str) -> tuple[int, dict[str, str], str, dict[str, Any]]:
        cfg = tiny(profile=profile, **gated(ttl_s=0.2, sweep_interval_s=0.05))
        async with running(cfg) as r:
            tasks = await _fill(r, 0)
            res = await post(r, "/v1/chat/completions", chat(stream=True), {"x-request-id": "late"})
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return res.status, res.headers, res.text, r.by_id()["late"]

    async def go() -> None:
        st, h, text, rec = await one("llm-d")
        assert st == 429 and h["x-llm-d-request-dropped-reason"] == "rejected-ttl-expired"
        assert text == ("inference error: ResourceExhausted - request timed out in queue: request evicted from "
                        "queue: request TTL expired")
        assert rec["outcome"] == "queue_timeout" and rec["queue_wait_ns"] >= 0.2e9
        st, h, text, rec = await one("gaie-v1")
        assert st == 503 and "x-llm-d-request-dropped-reason" not in h
        assert text.startswith("inference error: ServiceUnavailable - request timed out in queue")
        assert rec["outcome"] == "queue_timeout"

    asyncio.run(go())


def test_client_disconnect_while_queued() -> None:
    async def go() -> None:
        async with running(tiny(**gated())) as r:
            tasks = await _fill(r, 0)
            q = asyncio.create_task(post(r, "/v1/chat/completions", chat(), {"x-request-id": "bye"}))
            await wait_until(lambda: r.server.stack.flow.count == 1)  # type: ignore[union-attr]
            q.cancel()
            await wait_until(lambda: "bye" in r.by_id())
            rec = r.by_id()["bye"]
            assert rec["outcome"] == "cancelled" and rec["reason"] == "rejected-context-cancelled"
            assert rec["status"] == 503
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, q, return_exceptions=True)

    asyncio.run(go())


def test_replica_down_no_endpoints_and_recovery() -> None:
    async def go() -> None:
        cfg = tiny(speed=1.0, flow_control={"no_endpoint_ttl_s": 0.2, "sweep_interval_s": 0.05})
        async with running(cfg) as r:
            streaming = asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=2000, stream=True),
                                                 {"x-request-id": "inflight"}))
            await wait_until(lambda: r.server.stack.engine.replicas[0].running != [])
            res = await r.session.post(r.url + "/admin/faults",
                                       json={"kind": "replica_down", "duration_s": 0.5, "name": "swap"})
            assert res.status == 200
            assert (await r.session.get(r.url + "/health")).status == 503
            res2 = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "noep"})
            assert res2.status == 503 and res2.headers["x-llm-d-request-dropped-reason"] == "rejected-no-endpoints"
            await asyncio.gather(streaming, return_exceptions=True)
            await wait_until(lambda: r.server.stack.ready(), 3.0)
            ok = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "after"})
            assert ok.status == 200
            led = r.by_id()
            assert led["inflight"]["outcome"] == "failed" and led["inflight"]["reason"] == "replica_down"
            assert led["noep"]["outcome"] == "overloaded"
            assert led["after"]["outcome"] == "served"

    asyncio.run(go())


def test_injected_errors_and_stream_cut() -> None:
    async def go() -> None:
        async with running(tiny()) as r:
            res = await post(r, "/v1/chat/completions", chat(), {"x-rushhour-fault": "503", "x-request-id": "e"})
            assert res.status == 503 and json.loads(res.text)["error"]["code"] == 503
            res = await post(r, "/v1/chat/completions", chat(stream=True, max_tokens=10),
                             {"x-rushhour-fault": "cut:3", "x-request-id": "cut"})
            assert res.status == 200 and sum('"content":"word "' in e for e in res.events()) == 3
            assert "[DONE]" not in res.text and res.broken
            led = r.by_id()
            assert led["e"]["outcome"] == "failed" and led["e"]["fault"] == "header:503"
            assert led["cut"]["outcome"] == "failed" and led["cut"]["output_tokens"] == 3
            assert led["cut"]["reason"] == "stream_cut"
        cfg = tiny(faults=[{"kind": "error", "status": 429, "rate": 1.0, "name": "storm"}])
        async with running(cfg) as r:
            res = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "s"})
            assert res.status == 429 and r.by_id()["s"]["fault"] == "storm"

    asyncio.run(go())


def test_warmup() -> None:
    async def go() -> None:
        async with running(tiny(speed=1.0, warmup_s=0.3)) as r:
            assert (await r.session.get(r.url + "/health")).status == 503
            res = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "w"})
            assert res.status == 503 and res.headers["x-llm-d-request-dropped-reason"] == "rejected-no-endpoints"
            await asyncio.sleep(0.35)
            assert (await r.session.get(r.url + "/health")).status == 200
            assert (await post(r, "/v1/chat/completions", chat())).status == 200
            assert r.by_id()["w"]["outcome"] == "overloaded"

    asyncio.run(go())


def test_bad_input_every_arrival_in_ledger() -> None:
    async def go() -> None:
        async with running(tiny(max_body_bytes=2000)) as r:
            cases = {
                "json": (b'{"model": "testbed",', 400),
                "utf8": (b'{"model": "\xff\xfe"}', 400),
                "model": (json.dumps(chat(model="nope")).encode(), 404),
                "msgs": (b'{"model": "testbed", "messages": []}', 400),
                "big": (json.dumps(chat("x" * 5000)).encode(), 413),
                "maxtok": (json.dumps(chat(max_tokens=-3)).encode(), 400),
                "ctx": (json.dumps(chat(max_tokens=10_000_000)).encode(), 400),
                "array": (b"[1, 2]", 400),
            }
            for rid, (raw, status) in cases.items():
                res = await post(r, "/v1/chat/completions", None, {"x-request-id": rid}, raw=raw)
                assert res.status == status, (rid, res.status, res.text)
            res = await post(r, "/v1/chat/completions", None, {"x-request-id": "json2"}, raw=b"{")
            assert res.text.startswith("inference error: BadRequest - ")
            model = await post(r, "/v1/chat/completions", chat(model="nope"))
            assert json.loads(model.text)["error"]["code"] == 404
            led = r.by_id()
            assert set(cases) <= set(led)
            assert all(led[k]["outcome"] == "failed" and led[k]["status"] == s for k, (_, s) in cases.items())

    asyncio.run(go())
