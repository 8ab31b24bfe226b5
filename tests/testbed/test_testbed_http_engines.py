"""vllm, sglang, openai, anthropic, fifo and headroom profiles over real HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from test_testbed_http_llmd import wait_until
from testbed_helpers import Running, chat, post, running, tiny


async def _blocker(r: Running, n: int = 1, tokens: int = 4000) -> list[asyncio.Task[Any]]:
    """Occupy the single slot with n long streams. By default they outlast the test, which cancels them: one of
    400 tokens (~2 s) ended on a loaded CI host before the request meant to find the queue full was sent.
    A test that waits for its blockers passes a short ``tokens``."""
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(post(r, "/v1/chat/completions", chat(max_tokens=tokens, stream=True),
                                              {"x-request-id": f"block{i}"})))
    eng = r.server.stack.engine
    await wait_until(lambda: sum(len(x.running) + x.n_waiting for x in eng.replicas) >= n)
    return tasks


async def _stop(tasks: list[asyncio.Task[Any]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_vllm_priority_lower_first_and_queue_limit() -> None:
    async def go() -> None:
        cfg = tiny(profile="vllm", speed=1.0, max_num_seqs=1, vllm={"max_num_queued_reqs": 3})
        async with running(cfg) as r:
            block = await _blocker(r, tokens=60)
            late = asyncio.create_task(post(r, "/v1/chat/completions", chat(priority=5), {"x-request-id": "p5"}))
            await wait_until(lambda: r.server.stack.engine.replicas[0].n_waiting == 1)
            urgent = asyncio.create_task(post(r, "/v1/chat/completions", chat(priority=-5),
                                              {"x-request-id": "m5"}))
            await wait_until(lambda: r.server.stack.engine.replicas[0].n_waiting == 2)
            full = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "full"})
            assert full.status == 503
            err = json.loads(full.text)["error"]
            assert err["code"] == 503 and err["param"] is None and err["message"]
            await asyncio.gather(late, urgent, *block)
            led = r.by_id()
            assert led["m5"]["first_token_ns"] < led["p5"]["first_token_ns"]  # lower value = more urgent
            assert led["m5"]["priority"] == -5 and led["full"]["outcome"] == "queue_full"

    asyncio.run(go())


def test_vllm_preemption_delays_but_serves() -> None:
    async def go() -> None:
        cfg = tiny(profile="vllm", kv_capacity_tokens=400, max_num_seqs=4)
        async with running(cfg) as r:
            bodies = [chat("x" * 400, max_tokens=150, priority=i) for i in range(3)]
            res = await asyncio.gather(*[post(r, "/v1/chat/completions", b, {"x-request-id": f"v{i}"})
                                         for i, b in enumerate(bodies)])
            assert all(x.status == 200 for x in res)
            led = r.by_id()
            assert all(v["outcome"] == "served" for v in led.values())
            assert sum(v["preemptions"] for v in led.values()) >= 1
            assert led["v0"]["preemptions"] == 0  # the most urgent is never the victim
            m = await (await r.session.get(r.url + "/metrics")).text()
            assert "vllm:num_preemptions_total" in m

    asyncio.run(go())


def test_sglang_waiting_timeout_in_band_and_json() -> None:
    async def go() -> None:
        cfg = tiny(profile="sglang", speed=1.0, max_num_seqs=1, sglang={"waiting_timeout_s": 0.2})
        async with running(cfg) as r:
            block = await _blocker(r)
            s, j = await asyncio.gather(
                post(r, "/v1/chat/completions", chat(stream=True), {"x-request-id": "s"}),
                post(r, "/v1/chat/completions", chat(), {"x-request-id": "j"}))
            assert s.status == 200
            ev = s.events()
            assert ev[-1] == "[DONE]"
            assert json.loads(ev[-2]) == {"error": {"object": "error", "message": "Request waiting timeout reached.",
                                                    "type": "SERVICE_UNAVAILABLE", "param": None, "code": 503}}
            assert j.status == 503 and json.loads(j.text)["error"]["message"] == "Request waiting timeout reached."
            led = r.by_id()
            assert led["s"]["in_band_error"] is True and led["s"]["status"] == 200
            assert led["s"]["outcome"] == "queue_timeout" and led["j"]["outcome"] == "queue_timeout"
            await _stop(block)

    asyncio.run(go())


def test_sglang_queue_full_and_priority_abort() -> None:
    async def go() -> None:
        cfg = tiny(profile="sglang", speed=1.0, max_num_seqs=1, sglang={"max_queued_requests": 1})
        async with running(cfg) as r:
            block = await _blocker(r)
            low = asyncio.create_task(post(r, "/v1/chat/completions", chat(stream=True, priority=1),
                                           {"x-request-id": "low"}))
            await wait_until(lambda: r.server.stack.engine.replicas[0].n_waiting == 1)
            same = await post(r, "/v1/chat/completions", chat(priority=1), {"x-request-id": "same"})
            assert same.status == 503 and json.loads(same.text)["error"]["message"] == "The request queue is full."
            high = asyncio.create_task(post(r, "/v1/chat/completions", chat(priority=10), {"x-request-id": "hi"}))
            lres = await low
            assert lres.status == 200
            assert "The request is aborted by a higher priority request." in lres.events()[-2]
            await _stop([*block, high])
            led = r.by_id()
            assert led["low"]["outcome"] == "preempted" and led["same"]["outcome"] == "queue_full"

    asyncio.run(go())


def test_openai_tiers_flex_429_and_rate_limit() -> None:
    async def go() -> None:
        cfg = tiny(profile="openai", speed=1.0, max_num_seqs=1, flow_control={"queue_depth_threshold": 1.0},
                   openai={"rpm_limit": 5})
        async with running(cfg) as r:
            ok = await post(r, "/v1/chat/completions", chat(stream=True, service_tier="priority"),
                            {"authorization": "Bearer a"})
            assert ok.status == 200 and json.loads(ok.events()[0])["service_tier"] == "priority"
            assert ok.headers["x-ratelimit-limit-requests"] == "5"
            assert ok.headers["x-ratelimit-remaining-requests"] == "4"
            assert ok.headers["x-ratelimit-reset-requests"].endswith("ms")
            block = await _blocker(r, n=2)  # one running, one waiting: saturation 1.0
            flex = await post(r, "/v1/chat/completions", chat(service_tier="flex"), {"x-request-id": "flex"})
            assert flex.status == 429 and json.loads(flex.text)["error"]["code"] == "resource_unavailable"
            for _ in range(2):
                await post(r, "/v1/chat/completions", chat(service_tier="flex"), {"authorization": "Bearer a"})
            await _stop(block)  # the rate-limit checks below need no saturation, and must not queue behind it
            rl = await post(r, "/v1/chat/completions", chat(), {"authorization": "Bearer a", "x-request-id": "rl"})
            # Bearer a used: 1 ok + 2 flex; the blockers and the anonymous flex count on other keys
            assert rl.status in (200, 429)
            for i in range(3):
                rl = await post(r, "/v1/chat/completions", chat(max_tokens=1),
                                {"authorization": "Bearer a", "x-request-id": f"rl2-{i}"})
            assert rl.status == 429 and json.loads(rl.text)["error"]["code"] == "rate_limit_exceeded"
            led = r.by_id()
            assert led["flex"]["outcome"] == "shed" and led["rl2-2"]["outcome"] == "rate_limited"
            assert led["flex"]["service_tier"] == "flex"

    asyncio.run(go())


def test_anthropic_messages_sse_and_529() -> None:
    async def go() -> None:
        cfg = tiny(profile="anthropic", speed=1.0, max_num_seqs=1, flow_control={"queue_depth_threshold": 1.0},
                   anthropic={"overload_saturation": 1.0})
        async with running(cfg) as r:
            body = {"model": "testbed", "max_tokens": 3, "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]}
            res = await post(r, "/v1/messages", body, {"x-request-id": "m"})
            events = [ln[7:] for ln in res.text.split("\n") if ln.startswith("event: ")]
            assert events == ["message_start", "content_block_start", "ping", "content_block_delta",
                              "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
                              "message_stop"]
            assert res.headers["request-id"] == "m"
            nb = await post(r, "/v1/messages", {**body, "stream": False})
            assert json.loads(nb.text)["usage"]["output_tokens"] == 3
            bad = await post(r, "/v1/messages", {"model": "testbed", "messages": []})
            assert json.loads(bad.text)["error"]["type"] == "invalid_request_error"
            block = await _blocker(r, n=2)
            over = await post(r, "/v1/messages", body, {"x-request-id": "over"})
            assert over.status == 529
            assert json.loads(over.text) == {"type": "error", "error": {"type": "overloaded_error",
                                                                        "message": "Overloaded"}, "request_id": "over"}
            await _stop(block)
            led = r.by_id()
            assert led["m"]["outcome"] == "served" and led["m"]["service_tier"] == "priority"
            assert led["over"]["outcome"] == "overloaded"

    asyncio.run(go())


def test_fifo_and_headroom_serve_everything() -> None:
    async def go() -> None:
        for profile in ("fifo", "headroom"):
            async with running(tiny(profile=profile, replicas=2)) as r:
                hdrs = [{"x-llm-d-inference-objective": o} for o in ("interactive", "standard", "batch")] * 4
                res = await asyncio.gather(*[post(r, "/v1/chat/completions", chat(stream=True), h) for h in hdrs])
                assert all(x.status == 200 and x.events()[-1] == "[DONE]" for x in res)
                led = r.ledger()
                assert len(led) == 12 and all(x["outcome"] == "served" for x in led)
                if profile == "headroom":
                    assert sorted({x["priority"] for x in led}) == [0, 1, 2]

    asyncio.run(go())


def test_vllm_queued_token_limit_refuses_past_its_backlog() -> None:
    """vLLM's --max-num-queued-tokens: an arrival finding the prompts still before their first token at or over
    the limit is refused (503, queue_full); the request limit alone would have taken it."""
    async def go() -> None:
        cfg = tiny(profile="vllm", speed=1.0, max_num_seqs=1, vllm={"max_num_queued_tokens": 60})
        async with running(cfg) as r:
            block = await _blocker(r, tokens=60)
            long_prompt = "word " * 80  # one waiting prompt past the 60-token backlog
            waiting = asyncio.create_task(post(r, "/v1/chat/completions", chat(long_prompt), {"x-request-id": "w"}))
            await wait_until(lambda: r.server.stack.engine.replicas[0].n_waiting == 1)
            assert r.server.stack.engine.replicas[0].prefill_tokens_queued() >= 60
            full = await post(r, "/v1/chat/completions", chat(), {"x-request-id": "full"})
            assert full.status == 503
            await asyncio.gather(waiting, *block)
            led = r.by_id()
            assert led["full"]["outcome"] == "queue_full" and led["w"]["outcome"] != "queue_full"

    asyncio.run(go())
