"""A user-written locustfile on rushhour's lean wire client (no FastHttpUser buffering in the TTFT).

    .venv/bin/python -m locust -f examples/locustfile.py --headless -u 50 -r 10 -t 60s \
        --host http://127.0.0.1:8000

It streams OpenAI chat completions with llm-d tier headers, times every token as it arrives and
reports each attempt to Locust's statistics (so the web UI works) — and prints nothing else. For a
full run with records, phases and the audit, use ``rushhour run`` instead.
"""

from __future__ import annotations

import uuid

from locust import User, between, task

from loadgen.engine.wire.client import ConnectionPool, Timeouts, perform
from loadgen.engine.wire.dialects import build_body
from loadgen.engine.wire.http import Endpoint, build_request
from loadgen.prompts import Conversation, text
from loadgen.record import RequestRecord


class TieredChatUser(User):
    """One chat user on the ``interactive`` tier of an llm-d stack."""

    wait_time = between(0.5, 2.0)
    tier, objective, tenant = "interactive", "interactive", "team-a"

    def on_start(self) -> None:
        self.endpoint = Endpoint.parse(self.host or "http://127.0.0.1:8000")
        self.pool = ConnectionPool(self.endpoint, max_idle=1)  # keep-alive, one per user
        self.turn = 0

    def on_stop(self) -> None:
        self.pool.close()

    @task
    def chat(self) -> None:
        self.turn += 1
        prompt = Conversation(text("system", 256), [("user", text(f"{id(self)}:{self.turn}", 300))])
        path, body = build_body("openai-chat", "testbed", prompt, max_tokens=64, stream=True)
        rid = uuid.uuid4().hex
        headers = {
            "x-request-id": rid,
            "x-llm-d-inference-objective": self.objective,
            "x-llm-d-inference-fairness-id": self.tenant,
        }
        rec = RequestRecord(run_id="adhoc", seq=0, request_id=rid, logical_id=rid, tier=self.tier,
                            tenant=self.tenant, persona="example")
        perform(self.pool, build_request(self.endpoint, path, headers, body), rec, anchor_ns=0,
                dialect="openai-chat", stream=True, timeouts=Timeouts(connect_s=5, ttft_s=60, total_s=300))
        ok = 200 <= rec.status < 300 and rec.complete and not rec.in_band_error
        self.environment.events.request.fire(
            request_type="POST",
            name=f"{self.tier} TTFT" if rec.first_token_ns else self.tier,
            response_time=((rec.first_token_ns or rec.done_ns or 0) - (rec.sent_ns or 0)) / 1e6,
            response_length=rec.tokens,
            exception=None if ok else RuntimeError(f"{rec.status} {rec.reason or rec.error or ''}"),
            context={"tenant": self.tenant},
        )
