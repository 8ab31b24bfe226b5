"""aiohttp application: OpenAI/Anthropic endpoints, health, metrics, admin, and the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import uuid
from typing import IO, Any

from aiohttp import web
from aiohttp.http import HttpVersion11

from rushhour.testbed.clock import Clock, MonotonicClock
from rushhour.testbed.config import FaultSpec, TestbedConfig, from_dict
from rushhour.testbed.job import EVICTED, REPLICA_DOWN, Job
from rushhour.testbed.ledger import Ledger, Record
from rushhour.testbed.metrics import render
from rushhour.testbed.profiles import (
    AnthropicProfile,
    Classified,
    OpenAIProfile,
    Profile,
    Reply,
)
from rushhour.testbed.stack import Stack
from rushhour.testbed.timing import engine_metrics, timing_headers
from rushhour.testbed.tokens import block_hashes, count_tokens
from rushhour.testbed.toolcalls import ANTHROPIC_ID, OPENAI_ID, VLLM_ID, plan_call, received_results
from rushhour.testbed.wire import Wire, frame

log = logging.getLogger("testbed")

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/messages": "messages"}
STACK_KEY = web.AppKey("stack", Stack)
CUT = "cut"  # stream cut by a fault
GONE = "gone"  # client went away mid-stream


class BadInput(Exception):
    """A request the stack refuses before admission."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.reason)
        self.reply = reply


class Exchange:
    """One HTTP request in flight: the bridge between the engine's events and the socket."""

    def __init__(self, rec: Record) -> None:
        loop = asyncio.get_running_loop()
        self.rec = rec
        self.job: Job | None = None
        self.wire: Wire | None = None
        self.admitted = False
        self.finalized = False
        self.dispatched: asyncio.Future[str | None] = loop.create_future()
        self.done: asyncio.Future[str | None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.chunked = True
        self.token_bytes = b""
        self.sent = 0
        self.cut_after: int | None = None
        self.plain_upto = 1 << 62  # tokens below this index are all alike (a tool call's last one closes its JSON)
        self.stack: Stack | None = None

    # ---- JobSink ---------------------------------------------------------------------------
    def on_dispatch(self, job: Job) -> None:
        """Placed on a replica."""
        if not self.dispatched.done():
            self.dispatched.set_result(None)

    def on_token(self, job: Job) -> None:
        """Write the new token straight to the socket (no coroutine wake-up per token)."""
        t = self.transport
        if t is None:
            return
        # the hot path: one pre-framed chunk per decode step (the engine notifies sinks after the step
        # fired, so a job dropped meanwhile, whose `done` is already set, writes nothing)
        if (self.sent and self.cut_after is None and job.output - self.sent == 1 and self.sent < self.plain_upto
                and not self.done.done() and not t.is_closing()):
            t.write(self.token_bytes)
            self.sent += 1
            return
        self._write_tokens(job.output - self.sent)

    def on_finish(self, job: Job) -> None:
        """All tokens produced."""
        if not self.done.done():
            self.done.set_result(None)

    def on_drop(self, job: Job, kind: str) -> None:
        """Dropped by flow control or the engine."""
        for f in (self.dispatched, self.done):
            if not f.done():
                f.set_result(kind)

    # ---- streaming ----------------------------------------------------------------------------
    def raw(self, data: bytes) -> bool:
        """Write bytes (chunk-framed when needed); False if the client is gone."""
        t = self.transport
        if t is None or t.is_closing():
            return False
        t.write(frame(data) if self.chunked else data)
        return True

    def start(self, transport: asyncio.Transport, chunked: bool) -> None:
        """Headers are out: flush tokens produced meanwhile, then write per token."""
        assert self.wire is not None and self.job is not None
        self.transport = transport
        self.chunked = chunked
        self.token_bytes = frame(self.wire.token) if chunked else self.wire.token
        if self.wire.call is not None:
            self.plain_upto = self.job.max_tokens - 1
        self._write_tokens(self.job.output - self.sent)

    def _write_tokens(self, n: int) -> None:
        if n <= 0 or self.done.done():
            return
        t = self.transport
        job = self.job
        assert t is not None and job is not None and self.wire is not None
        if t.is_closing():
            self._end_early(GONE)
            return
        if self.cut_after is not None:
            n = min(n, self.cut_after - self.sent)
        if self.wire.call is None:
            data = self.token_bytes * n
        else:
            data = self.wire.tokens(self.sent, n, job.max_tokens)
            data = frame(data) if self.chunked else data
        if self.sent == 0:
            self.rec.first_token_ns = self.stack.clock.now_ns() if self.stack else None
            head = self.wire.head(job.prompt_tokens, job.cached_tokens)
            if head:
                data = (frame(head) if self.chunked else head) + data
        t.write(data)
        self.sent += n
        if self.cut_after is not None and self.sent >= self.cut_after:
            t.close()  # the stream-cut fault: connection closed mid-response
            self._end_early(CUT)

    def _end_early(self, why: str) -> None:
        if self.stack is not None and self.job is not None:
            self.stack.cancel(self.job)
        if not self.done.done():
            self.done.set_result(why)


def _block_text(block: dict[str, Any]) -> str:
    """The prompt text of one content block: text, a tool_use's name and input, a tool_result's content."""
    kind = block.get("type")
    if kind == "tool_use":
        return f"{block.get('name', '')}({json.dumps(block.get('input'), separators=(',', ':'))})"
    if kind == "tool_result":
        inner = block.get("content", "")
        if isinstance(inner, list):
            return "".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
        return str(inner)
    return str(block.get("text", ""))


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function")
    if not isinstance(fn, dict):
        return ""
    return f"{fn.get('name', '')}({fn.get('arguments', '')})"


class Server:
    """Request handling on top of a Stack; owns the ledger and the in-flight set."""

    def __init__(self, cfg: TestbedConfig, ledger: Ledger, clock: Clock) -> None:
        self.cfg = cfg
        self.ledger = ledger
        self.clock = clock
        self.stack = Stack(cfg, clock)
        self.profile: Profile = self.stack.profile
        self.anthropic_shape = AnthropicProfile(cfg)
        self.live: set[Exchange] = set()
        self.max_model_len = self.stack.engine.params.kv_capacity_tokens
        # every request body as received, one JSON line each (tests read what the stack was sent)
        self.request_log: IO[str] | None = (open(cfg.request_log, "a", encoding="utf-8")  # noqa: SIM115
                                            if cfg.request_log else None)

    # ---- ledger ----------------------------------------------------------------------------
    def finalize(self, ex: Exchange, outcome: str | None = None) -> None:
        """Write the exchange's record exactly once."""
        if ex.finalized:
            return
        ex.finalized = True
        self.live.discard(ex)
        rec = ex.rec
        if outcome is not None:
            rec.outcome = outcome
        rec.end_ns = self.clock.now_ns()
        job = ex.job
        if job is not None:
            rec.dispatch_ns = job.dispatch_ns
            rec.scheduled_ns = job.scheduled_ns
            self.stack.observe_finished(job)
            rec.replica = job.replica if job.dispatch_ns is not None else None
            rec.cached_tokens = job.cached_tokens
            rec.preemptions = job.preemptions
            if job.scheduled_ns is not None:
                rec.queue_wait_ns = job.scheduled_ns - rec.arrival_ns
            elif ex.admitted:
                rec.queue_wait_ns = rec.end_ns - rec.arrival_ns
        rec.output_tokens = ex.sent if rec.stream else rec.output_tokens
        self.ledger.write(rec)

    @staticmethod
    def _messages(ex: Exchange) -> bool:
        """Anthropic's Messages endpoint: its answers carry no vLLM ``metrics`` object."""
        return ex.rec.endpoint == "/v1/messages"

    # ---- responses ---------------------------------------------------------------------------
    def _headers(self, rec: Record, cl: Classified | None) -> dict[str, str]:
        h = {"x-request-id": rec.request_id}
        if isinstance(self.profile, OpenAIProfile):
            h.update(self.stack.rate_headers(cl.tenant if cl else "anonymous"))
        if isinstance(self.profile, AnthropicProfile):
            h.update(self.stack.anthropic_rate_headers(cl.tenant if cl else "anonymous"))
        if isinstance(self.profile, AnthropicProfile) or rec.endpoint == "/v1/messages":
            h["request-id"] = rec.request_id
        return h

    async def _send(self, request: web.Request, ex: Exchange, reply: Reply,
                    cl: Classified | None = None) -> web.StreamResponse:
        rec = ex.rec
        headers = {**self._headers(rec, cl), **timing_headers(self.profile, ex.job, ex.rec.stream), **reply.headers,
                   "Content-Type": reply.content_type}
        resp = web.Response(status=reply.status, body=reply.body, headers=headers)
        rec.status, rec.reason = reply.status, reply.reason
        rec.outcome = reply.outcome
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    # ---- parsing ---------------------------------------------------------------------------
    def _err_profile(self, endpoint: str) -> Profile:
        return self.anthropic_shape if endpoint == "messages" else self.profile

    def _parse(self, raw: bytes, endpoint: str, rid: str) -> dict[str, Any]:
        prof = self._err_profile(endpoint)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(prof.bad_request("Request body is not valid UTF-8.", rid)) from None
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(prof.bad_request(f"Invalid JSON body: {exc.msg}.", rid)) from None
        if not isinstance(body, dict):
            raise BadInput(prof.bad_request("The request body must be a JSON object.", rid))
        return body

    def _prompt(self, body: dict[str, Any], endpoint: str, rid: str) -> bytes:
        prof = self._err_profile(endpoint)
        if endpoint == "completions":
            p = body.get("prompt")
            if isinstance(p, str):
                return p.encode()
            if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
                return "\n".join(p).encode()
            if isinstance(p, list) and p and all(isinstance(x, int) for x in p):
                # token ids: keep 4 bytes per id so counting stays one token each
                return b"".join(int(x).to_bytes(4, "little", signed=True) for x in p)
            raise BadInput(prof.bad_request("'prompt' must be a string or a list of strings.", rid, "prompt"))
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadInput(prof.bad_request("'messages' must be a non-empty list.", rid, "messages"))
        parts: list[str] = []
        if endpoint == "messages":
            system = body.get("system")
            if isinstance(system, str):
                parts.append("system: " + system)
            elif isinstance(system, list):
                parts.append("system: " + "".join(b.get("text", "") for b in system if isinstance(b, dict)))
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadInput(prof.bad_request("Each message needs a 'role'.", rid, "messages"))
            c = m.get("content", "")
            if isinstance(c, list):
                c = "".join(_block_text(b) for b in c if isinstance(b, dict))
            elif c is None:
                c = ""
            elif not isinstance(c, str):
                raise BadInput(prof.bad_request("Message 'content' must be a string or a list.", rid,
                                                "messages"))
            calls = m.get("tool_calls")
            if isinstance(calls, list):  # an assistant's tool calls are prompt text too (the template renders them)
                c += "".join(_call_text(tc) for tc in calls if isinstance(tc, dict))
            parts.append(f"{m['role']}: {c}\n")
        return "".join(parts).encode()

    def _max_tokens(self, body: dict[str, Any], endpoint: str, rid: str) -> int:
        prof = self._err_profile(endpoint)
        v = body.get("max_completion_tokens", body.get("max_tokens"))
        if v is None:
            if endpoint == "messages":
                raise BadInput(prof.bad_request("max_tokens: Field required", rid, "max_tokens"))
            return self.cfg.default_max_tokens
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadInput(prof.bad_request("max_tokens must be a positive integer.", rid, "max_tokens"))
        return v

    # ---- the inference handler --------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/chat/completions, /v1/completions, /v1/messages."""
        now = self.clock.now_ns()
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        endpoint = ENDPOINTS[request.path]
        rec = Record(request_id=rid, arrival_ns=now, profile=self.cfg.profile, endpoint=request.path,
                     traceparent=request.headers.get("traceparent", "")[:64] or None)
        ex = Exchange(rec)
        ex.stack = self.stack
        self.live.add(ex)
        try:
            return await self._handle(request, ex, endpoint)
        except BadInput as bad:
            return await self._send(request, ex, bad.reply)
        except asyncio.CancelledError:
            self._client_gone(ex)
            raise
        except ConnectionError:
            # the client went away while the response head or body was being written
            self._client_gone(ex)
            return web.Response(status=499)  # never reaches anyone; aiohttp drops it quietly
        except Exception:
            log.exception("request %s failed", rid)
            rec.reason = "internal_error"
            return await self._send(request, ex, self.profile.error(500, "Internal server error.",
                                                                    "InternalServerError", rid=rid))
        finally:
            self.finalize(ex)

    def _client_gone(self, ex: Exchange) -> None:
        rec = ex.rec
        if ex.finalized:
            return
        # the handler was cancelled while awaiting `done`, which cancels that future too: a cancelled
        # future's result() raises, and the record would keep its default outcome
        why = ex.done.result() if ex.done.done() and not ex.done.cancelled() else None
        if why == EVICTED:
            rec.outcome, rec.reason = "preempted", "evicted"
            return
        if why in (CUT, REPLICA_DOWN):
            # we closed the connection ourselves; aiohttp then cancels the handler
            rec.outcome, rec.reason = "failed", "stream_cut" if why == CUT else REPLICA_DOWN
            return
        if ex.job is not None and self.stack.cancel(ex.job) and self.profile.gateway:
            # the EPP answers a cancelled queued request with 503 rejected-context-cancelled
            r = self.profile.drop("cancelled", rec.request_id, False)
            rec.status, rec.reason = r.status, r.reason
        rec.outcome = "cancelled"

    async def _handle(self, request: web.Request, ex: Exchange, endpoint: str) -> web.StreamResponse:
        rec = ex.rec
        rid = rec.request_id
        prof = self.profile
        limit = self.cfg.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise BadInput(self._err_profile(endpoint).too_large(limit, rid))
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BadInput(self._err_profile(endpoint).too_large(limit, rid)) from None
        body = self._parse(raw, endpoint, rid)
        if self.request_log is not None:
            self.request_log.write(json.dumps({"request_id": rid, "endpoint": request.path, "body": body},
                                              separators=(",", ":")) + "\n")
            self.request_log.flush()
        rec.stream = body.get("stream") is True
        model = body.get("model")
        if model is None and (isinstance(prof, OpenAIProfile | AnthropicProfile) or endpoint == "messages"):
            raise BadInput(self._err_profile(endpoint).bad_request("you must provide a model parameter", rid,
                                                                   "model"))
        model = self.cfg.models[0] if model is None else model
        if not isinstance(model, str) or model not in self.cfg.models:
            raise BadInput(self._err_profile(endpoint).unknown_model(str(model), rid))
        rec.model = model
        prompt = self._prompt(body, endpoint, rid)
        rec.max_tokens = self._max_tokens(body, endpoint, rid)
        rec.prompt_tokens = count_tokens(prompt)
        rec.tool_results = received_results(body, endpoint)
        cl = prof.classify(request.headers, body)
        rec.objective, rec.priority, rec.tenant, rec.service_tier = (cl.objective, cl.priority, cl.tenant,
                                                                     cl.service_tier)
        if rec.prompt_tokens + rec.max_tokens > self.max_model_len:
            raise BadInput(self._err_profile(endpoint).bad_request(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{rec.prompt_tokens + rec.max_tokens} tokens ({rec.prompt_tokens} in the messages, "
                f"{rec.max_tokens} in the completion). Please reduce the length of the messages or completion.",
                rid))
        # ---- faults by header or schedule
        now = self.clock.now_ns()
        hdr = request.headers.get("x-rushhour-fault")
        if hdr:
            if hdr.startswith("cut:") and hdr[4:].isdigit():
                ex.cut_after, rec.fault = max(1, int(hdr[4:])), "header:" + hdr
            elif hdr.isdigit():
                rec.fault = "header:" + hdr
                return await self._send(request, ex, prof.injected(int(hdr), rid), cl)
        inj = self.stack.faults.error_for_arrival(now)
        if inj is not None:
            rec.fault = inj.name
            injected = prof.injected(inj.spec.status, rid)
            if inj.spec.retry_after_s is not None:
                injected.headers["Retry-After"] = f"{inj.spec.retry_after_s:g}"
            return await self._send(request, ex, injected, cl)
        if rec.stream and ex.cut_after is None:
            cut = self.stack.faults.cut_for_arrival(now)
            if cut is not None:
                ex.cut_after, rec.fault = cut.spec.after_tokens, cut.name
        if now < self.stack.ready_ns:
            return await self._send(request, ex, self.stack.not_ready(rid), cl)
        bypass = self.stack.faults.fail_open_for_arrival(now) if self.stack.flow is not None else None
        if bypass is not None:  # past the EPP: the model server sees the request without its objective
            rec.fault = bypass.name
            default = prof.classify({}, body)
            cl = dataclasses.replace(cl, priority=default.priority, rank=default.rank)
        # ---- admission
        job = Job(rid=rid, arrival_ns=rec.arrival_ns, prompt_tokens=rec.prompt_tokens, max_tokens=rec.max_tokens,
                  blocks=block_hashes(prompt, self.stack.engine.params.block_tokens), body_bytes=len(raw),
                  priority=cl.priority, rank=cl.rank, tier=cl.tier, tenant=cl.tenant, sink=ex)
        ex.job = job
        incl = bool((body.get("stream_options") or {}).get("include_usage")) if isinstance(
            body.get("stream_options"), dict) else False
        openai_style = isinstance(prof, OpenAIProfile)
        id_prefix = ANTHROPIC_ID if endpoint == "messages" else OPENAI_ID if openai_style else VLLM_ID
        tc = self.cfg.tool_calls
        call = plan_call(self.cfg.seed, tc.probability, prompt, body, endpoint, rid, id_prefix)
        if call is not None:
            rec.tool_call = call.id
        ex.wire = Wire(endpoint, rid, model, incl, cl.service_tier, openai_style, call)
        reply = self.stack.admit(job, bypass_flow=bypass is not None)
        if reply is not None:
            return await self._send(request, ex, reply, cl)
        ex.admitted = True
        kind = await ex.dispatched
        if kind is not None:
            return await self._send(request, ex, prof.drop(kind, rid, False), cl)
        if rec.stream:
            return await self._stream(request, ex, cl)
        kind = await ex.done
        if kind is not None:
            return await self._send(request, ex, prof.drop(kind, rid, False), cl)
        rec.output_tokens = job.output
        rec.first_token_ns = job.first_token_ns
        ok = Reply(200, ex.wire.body(job.prompt_tokens, job.output, job.cached_tokens,
                                     engine_metrics(self.profile, job, job.output, False, self._messages(ex))),
                   outcome="served")
        return await self._send(request, ex, ok, cl)

    async def _stream(self, request: web.Request, ex: Exchange, cl: Classified) -> web.StreamResponse:
        rec, job, wire = ex.rec, ex.job, ex.wire
        assert job is not None and wire is not None
        headers = {**self._headers(rec, cl), **timing_headers(self.profile, ex.job, ex.rec.stream),
                   "Content-Type": "text/event-stream",
                   "Cache-Control": "no-cache"}
        resp = web.StreamResponse(status=200, headers=headers)
        chunked = request.version == HttpVersion11
        if chunked:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        rec.status = 200
        transport = request.transport
        if transport is None:
            rec.outcome = "cancelled"
            self.stack.cancel(job)
            return resp
        ex.start(transport, chunked)
        kind = await ex.done
        if kind is None:
            metrics = engine_metrics(self.profile, job, ex.sent, True, self._messages(ex))
            if not ex.raw(wire.tail(job.prompt_tokens, ex.sent, job.cached_tokens, metrics)):
                rec.outcome = "cancelled"
                return resp
            rec.outcome = "served"
        elif kind == CUT:
            rec.outcome, rec.reason = "failed", "stream_cut"
            return resp
        elif kind == GONE:
            rec.outcome = "cancelled"
            return resp
        elif kind == REPLICA_DOWN:
            transport.close()  # the model server died: the connection drops mid-stream
            rec.outcome, rec.reason = "failed", REPLICA_DOWN
            return resp
        elif kind == EVICTED:
            # llm-d enableEviction after the 200 went out: the EPP's ImmediateResponse can no longer
            # replace the headers, so Envoy resets the stream (the client sees a truncated body)
            transport.close()
            rec.outcome, rec.reason = "preempted", "evicted"
            return resp
        else:
            reply = self.profile.drop(kind, rec.request_id, True)
            ex.raw(wire.in_band_error(reply.body))
            rec.outcome, rec.reason, rec.in_band_error = reply.outcome, reply.reason, True
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp

    # ---- other endpoints ----------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        """GET /v1/models."""
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "rushhour-testbed",
                 "max_model_len": self.max_model_len} for m in self.cfg.models]
        return web.json_response({"object": "list", "data": data})

    async def health(self, request: web.Request) -> web.Response:
        """GET /health: 503 while warming up or with every replica down."""
        if self.stack.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready")

    async def metrics(self, request: web.Request) -> web.Response:
        """GET /metrics."""
        return web.Response(text=render(self.stack), content_type="text/plain", charset="utf-8")

    async def admin_ledger(self, request: web.Request) -> web.Response:
        """GET /admin/ledger (JSONL)."""
        return web.Response(text=self.ledger.text(), content_type="application/x-ndjson")

    async def admin_config(self, request: web.Request) -> web.Response:
        """GET /admin/config."""
        return web.json_response(self.cfg.to_dict())

    async def admin_faults(self, request: web.Request) -> web.Response:
        """POST /admin/faults: one fault or a list; at_s is relative to now. GET lists them."""
        st = self.stack
        if request.method == "POST":
            try:
                data = await request.json()
                items = data if isinstance(data, list) else [data]
                specs = [from_dict(FaultSpec, d, f"faults[{i}]") for i, d in enumerate(items)]
                for s in specs:
                    TestbedConfig(faults=[s]).validate()
            except (ValueError, TypeError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            for s in specs:
                st.faults.add(s, self.clock.now_ns())
            st.apply_faults()
        out = [{"kind": f.spec.kind, "name": f.name, "start_ns": f.start_ns, "end_ns": f.end_ns,
                "active": f.active(self.clock.now_ns())} for f in st.faults.faults]
        return web.json_response({"faults": out})

    async def admin_stats(self, request: web.Request) -> web.Response:
        """GET /admin/stats: step lag, write lag and live counts (used by the benchmark).

        Step lag = how late a replica step fired vs its due time; write lag = due time -> that step's
        last token handed to its socket. Both over the most recent 20,000 steps, in seconds."""
        eng = self.stack.engine
        lags = sorted(eng.lag_s)
        wlags = sorted(eng.write_lag_s)

        def pct(xs: list[float], q: float) -> float:
            return xs[int(q * (len(xs) - 1))] if xs else 0.0

        return web.json_response({
            "in_flight": len(self.live), "steps": sum(r.steps_total for r in eng.replicas),
            "lag_samples": len(lags), "lag_p50_s": pct(lags, 0.5), "lag_p99_s": pct(lags, 0.99),
            "lag_max_s": lags[-1] if lags else 0.0,
            "write_lag_p50_s": pct(wlags, 0.5), "write_lag_p99_s": pct(wlags, 0.99),
            "write_lag_max_s": wlags[-1] if wlags else 0.0,
            "ledger_lines": len(self.ledger.lines),
        })

    async def admin_reset_stats(self, request: web.Request) -> web.Response:
        """POST /admin/stats/reset: forget step-lag and write-lag samples."""
        self.stack.engine.lag_s.clear()
        self.stack.engine.write_lag_s.clear()
        return web.json_response({"ok": True})

    # ---- lifecycle ----------------------------------------------------------------------------
    def shutdown_inflight(self) -> None:
        """End every in-flight request in the ledger (cancelled) and drop its connection."""
        for ex in list(self.live):
            if ex.job is not None:
                self.stack.cancel(ex.job)
            if ex.transport is not None and not ex.transport.is_closing():
                ex.transport.close()
            self.finalize(ex, "cancelled")


SERVER_KEY: web.AppKey[Server] = web.AppKey("server", Server)


def build_app(config: TestbedConfig, ledger: Ledger | None = None, clock: Clock | None = None) -> web.Application:
    """The aiohttp application for `config` (run it with handler_cancellation=True to see disconnects)."""
    server = Server(config, ledger or Ledger(None), clock or MonotonicClock())
    app = web.Application(client_max_size=config.max_body_bytes + 1)
    app[STACK_KEY] = server.stack
    app[SERVER_KEY] = server
    for path in ENDPOINTS:
        app.router.add_post(path, server.handle)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/health", server.health)
    app.router.add_get("/metrics", server.metrics)
    app.router.add_get("/admin/ledger", server.admin_ledger)
    app.router.add_get("/admin/config", server.admin_config)
    app.router.add_route("*", "/admin/faults", server.admin_faults)
    app.router.add_get("/admin/stats", server.admin_stats)
    app.router.add_post("/admin/stats/reset", server.admin_reset_stats)

    async def on_startup(app: web.Application) -> None:
        server.stack.start()

    async def on_shutdown(app: web.Application) -> None:
        server.shutdown_inflight()

    async def on_cleanup(app: web.Application) -> None:
        await server.stack.stop()
        server.ledger.close()
        if server.request_log is not None:
            server.request_log.close()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app
