"""Saturation: the higher tier waits less, the lower tier is dropped first, the ledger is complete."""

from __future__ import annotations

import asyncio
import random
from statistics import mean

from testbed_helpers import chat, post, running, tiny


def test_llmd_tiers_under_saturation() -> None:
    async def go() -> None:
        cfg = tiny(speed=1.0, max_num_seqs=2,
                   flow_control={"ttl_s": 0.8, "sweep_interval_s": 0.05,
                                 "bands": [{"priority": -1, "max_requests": 12}]})
        tiers = ["interactive", "standard", "batch"] * 20
        random.Random(7).shuffle(tiers)
        async with running(cfg) as r:
            res = await asyncio.gather(*[
                post(r, "/v1/chat/completions", chat(f"q{i}", max_tokens=20, stream=True),
                     {"x-request-id": f"r{i}", "x-llm-d-inference-objective": t,
                      "x-llm-d-inference-fairness-id": f"tenant{i % 3}"})
                for i, t in enumerate(tiers)])
            led = r.by_id()  # asserts exactly-once
            assert set(led) == {f"r{i}" for i in range(60)}
            by_tier: dict[str, list[dict[str, object]]] = {t: [] for t in set(tiers)}
            for i, t in enumerate(tiers):
                rec = led[f"r{i}"]
                assert rec["status"] == res[i].status  # the ledger agrees with what the client saw
                by_tier[t].append(rec)

            def dropped(t: str) -> int:
                return sum(1 for x in by_tier[t] if x["outcome"] != "served")

            def wait(t: str) -> float:
                return mean(float(x["queue_wait_ns"]) for x in by_tier[t] if x["outcome"] == "served")  # type: ignore[arg-type]

            assert dropped("interactive") == 0
            assert dropped("batch") >= dropped("standard") >= dropped("interactive")
            assert dropped("batch") >= 8  # 12-slot band: at least 8 of 20 rejected on arrival
            assert wait("interactive") < wait("standard")
            assert {x["priority"] for x in by_tier["batch"]} == {-1}
            outcomes = {x["outcome"] for x in by_tier["batch"]}
            assert outcomes <= {"served", "queue_full", "queue_timeout"} and "queue_full" in outcomes
            m = await (await r.session.get(r.url + "/metrics")).text()
            assert 'priority="-1",outcome="RejectedCapacity"' in m

    asyncio.run(go())
