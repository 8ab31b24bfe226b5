"""Record raw wire fixtures from the real vLLM and LiteLLM: every rejection shape they produce, one command.

    python engines/record_fixtures.py [vllm|vllm-tools|vllm-no-tools|litellm|gateway|all] [--out tests/fixtures/real]
    python engines/record_fixtures.py vllm --release vllm-0.31.0     # a release of engines/releases.toml

Starts each server (engines/serve.py), drives it into each shape (queue full, token backlog, the
error inside a 200 stream, capacity and quota 429s, auth 401, served answers) and writes one JSON per
shape under ``<out>/<stack>-<version>/``: status, lower-case headers, the body exactly as received
(de-chunked; SSE streams verbatim), the server and version, and the class the audit must give it.
Each engine's pinned release by default; ``--release NAME`` (once per engine) records another release listed
in engines/releases.toml, in its own folder. After a new release or lock, re-run it and commit the folder.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serve  # engines/ is a folder of scripts, not a package

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "real"

# Texts that pick a response out of a burst (the servers' own words, observed and in their source).
VLLM_BUSY = "The engine is currently busy and cannot accept new requests"
VLLM_BACKLOG = "reached its prefill token backlog limit"
LITELLM_SLOTS = "Deployment has all max_parallel_requests slots in use"


@dataclass
class Answer:
    """One raw HTTP answer."""

    status: int
    headers: dict[str, str]
    body: bytes
    stream: bool
    request: dict[str, object]
    path: str = "/v1/chat/completions"


def send(url: str, path: str, body: dict[str, object], headers: dict[str, str] | None = None,
         timeout: float = 120.0) -> Answer:
    """POST JSON on a fresh connection and read the whole answer (http.client de-chunks it)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"content-type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        raw = resp.read()
        heads = {k.lower(): v for k, v in resp.getheaders()}
        return Answer(resp.status, heads, raw, bool(body.get("stream")), body, path)
    finally:
        conn.close()


def burst(url: str, path: str, bodies: list[dict[str, object]], headers: list[dict[str, str]] | None = None
          ) -> list[Answer]:
    """Send all at once, one thread and one connection each, so the server sees them together."""
    out: list[Answer | None] = [None] * len(bodies)
    gate = threading.Barrier(len(bodies))

    def one(i: int) -> None:
        gate.wait()
        try:
            out[i] = send(url, path, bodies[i], (headers or [{}] * len(bodies))[i])
        except OSError:
            out[i] = None

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [a for a in out if a is not None]


def text(answer: Answer) -> str:
    return answer.body.decode("utf-8", errors="replace")


def in_band(answer: Answer) -> bool:
    """A 200 stream carrying an error object (``data: {"error": …}``)."""
    return answer.status == 200 and answer.stream and '"error"' in text(answer)


Pick = Callable[[Answer], bool]
Releases = dict[str, str]  # engine → the release to record (absent: its pinned one)


class Recorder:
    """Collects the first answer of each wanted shape and writes it as a fixture."""

    def __init__(self, out: Path, stack: str, version: str, profile: str, server: str,
                 cases: str = "*.json") -> None:
        self.dir = out / f"{stack}-{version}"
        self.stack, self.version, self.profile, self.server = stack, version, profile, server
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob(cases):  # only the cases this recorder writes
            old.unlink()
        self.written: list[str] = []

    def keep(self, case: str, answers: list[Answer], pick: Pick, expected: str, how: str) -> bool:
        """Write the first answer that ``pick`` accepts; say so when the burst produced none."""
        for answer in answers:
            if pick(answer):
                self._write(case, answer, expected, how)
                return True
        shapes = sorted({f"{a.status}{' stream' if a.stream else ''}{' in-band' if in_band(a) else ''}"
                         for a in answers})
        print(f"  {self.stack}: no {case} in this burst (got {', '.join(shapes) or 'nothing'})", file=sys.stderr)
        return False

    def _write(self, case: str, answer: Answer, expected: str, how: str) -> None:
        doc = {
            "profile": self.profile,
            "case": case,
            "server": self.server,
            "version": self.version,
            "status": answer.status,
            "headers": answer.headers,
            "body": text(answer),
            "stream": answer.stream,
            "expected_class": expected,
            "source": f"recorded from a real {self.server} {self.version} by engines/record_fixtures.py",
            "how": how,
            "request": {k: v for k, v in answer.request.items() if k != "messages" and k != "prompt"},
        }
        if answer.path != "/v1/chat/completions":
            doc["endpoint"] = answer.path  # the dialect to read it with (tests/audit/test_classify_real.py)
        name = f"{case}.json"
        (self.dir / name).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        self.written.append(name)
        print(f"  {self.stack}/{name}: {answer.status} → {expected}")


def chat(content: str, max_tokens: int, stream: bool, model: str = serve.MODEL_NAME, **extra: object
         ) -> dict[str, object]:
    body: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": content}],
                               "max_tokens": max_tokens, "stream": stream, **extra}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def long_prompt(words: int) -> str:
    """A prompt of 2–3 tokens a word for the tiny model's tokenizer (``queue17`` → ``queue`` + digits)."""
    return " ".join(f"queue{i}" for i in range(words))


def record_vllm(out: Path, use: Releases) -> list[str]:
    limits = serve.VllmLimits(max_num_seqs=4, max_num_queued_reqs=8, max_num_queued_tokens=2000,
                              max_model_len=2048)
    server = serve.start_vllm(limits=limits, release_name=use.get("vllm"))
    try:
        rec = Recorder(out, "vllm", server.version, "vllm", "vllm")
        url, path = server.url, "/v1/chat/completions"
        why = (f"--scheduling-policy priority --max-num-seqs {limits.max_num_seqs} "
               f"--max-num-queued-reqs {limits.max_num_queued_reqs} "
               f"--max-num-queued-tokens {limits.max_num_queued_tokens}")
        rec.keep("vllm-200-served", [send(url, path, chat("hello there", 16, False))],
                 lambda a: a.status == 200, "served", "one request on an idle server")
        rec.keep("vllm-200-stream-served", [send(url, path, chat("hello there", 16, True, priority=-10))],
                 lambda a: a.status == 200 and "[DONE]" in text(a) and '"error"' not in text(a), "served",
                 "one streamed request (priority -10) on an idle server")
        answers = burst(url, path, [chat("hello there", 200, False) for _ in range(24)])
        rec.keep("vllm-503-queue-full", answers, lambda a: a.status == 503 and VLLM_BUSY in text(a),
                 "queue_full", f"24 simultaneous requests, {why}")
        time.sleep(1)
        answers = burst(url, path, [chat(long_prompt(60), 200, True) for _ in range(40)])
        rec.keep("vllm-200-stream-in-band-queue-full", answers, lambda a: in_band(a) and VLLM_BUSY in text(a),
                 "queue_full", f"40 simultaneous streamed requests, {why}: the 503 comes inside a 200 stream")
        rec.keep("vllm-503-stream-queue-full", answers, lambda a: a.status == 503 and VLLM_BUSY in text(a),
                 "queue_full", f"40 simultaneous streamed requests, {why}: rejected before the stream started")
        time.sleep(1)
        prompt = long_prompt(500)  # ~1200 tokens: two overflow a 2000-token backlog
        answers = burst(url, path, [chat(prompt, 8, False) for _ in range(6)])
        rec.keep("vllm-503-token-backlog", answers, lambda a: a.status == 503 and VLLM_BACKLOG in text(a),
                 "queue_full", f"6 simultaneous ~1200-token prompts, {why}")
        time.sleep(1)
        answers = burst(url, path, [chat(prompt, 8, True) for _ in range(6)])
        rec.keep("vllm-200-stream-in-band-token-backlog", answers, lambda a: in_band(a) and VLLM_BACKLOG in text(a),
                 "queue_full", f"6 simultaneous streamed ~1200-token prompts, {why}")
        rec.keep("vllm-400-context-too-long", [send(url, path, chat(long_prompt(2000), 8, False))],
                 lambda a: a.status == 400, "failed", "a prompt longer than --max-model-len 2048")
        return rec.written
    finally:
        server.stop()


def _key(tier: str, i: int = 0) -> dict[str, str]:
    return {"authorization": f"Bearer sk-tier-{tier}-rec{i}"}


def record_litellm(out: Path, use: Releases) -> list[str]:
    tiers: dict[str, dict[str, int | None]] = {
        "interactive": {"max_parallel_requests": 50, "rpm_limit": None},
        "batch": {"max_parallel_requests": 2, "rpm_limit": None},
        "quota": {"max_parallel_requests": None, "rpm_limit": 2},
    }
    deployment = serve.LitellmDeployment(max_parallel_requests=4, mock_delay_s=0.5)
    server = serve.start_litellm(deployment=deployment, tiers=tiers, release_name=use.get("litellm"))
    try:
        rec = Recorder(out, "litellm", server.version, "litellm", "litellm proxy")
        url, path = server.url, "/v1/chat/completions"
        why = (f"mock deployment max_parallel_requests={deployment.max_parallel_requests}, "
               f"per-key tiers {json.dumps(tiers)}")
        rec.keep("litellm-200-served", [send(url, path, chat("hi", 16, False), _key("interactive"))],
                 lambda a: a.status == 200, "served", "one request, interactive key")
        rec.keep("litellm-200-stream-served", [send(url, path, chat("hi", 16, True), _key("interactive"))],
                 lambda a: a.status == 200 and "[DONE]" in text(a) and '"error"' not in text(a), "served",
                 "one streamed request, interactive key")
        rec.keep("litellm-401-bad-key", [send(url, path, chat("hi", 16, False), {"authorization": "Bearer sk-no"})],
                 lambda a: a.status == 401, "failed", "a key the custom-auth hook refuses")
        answers = burst(url, path, [chat("hi", 16, False) for _ in range(10)],
                        [_key("interactive", i) for i in range(10)])
        rec.keep("litellm-429-deployment-slots", answers, lambda a: a.status == 429 and LITELLM_SLOTS in text(a),
                 "queue_full", f"10 simultaneous interactive requests, {why}")
        time.sleep(1)
        answers = burst(url, path, [chat("hi", 16, True) for _ in range(10)],
                        [_key("interactive", i) for i in range(10)])
        rec.keep("litellm-429-stream-deployment-slots", answers,
                 lambda a: a.status == 429 and LITELLM_SLOTS in text(a), "queue_full",
                 f"10 simultaneous streamed interactive requests, {why}")
        rec.keep("litellm-200-stream-in-band-deployment-slots", answers,
                 lambda a: in_band(a) and LITELLM_SLOTS in text(a), "queue_full",
                 f"10 simultaneous streamed interactive requests, {why}: the 429 inside a 200 stream")
        time.sleep(1)
        answers = burst(url, path, [chat("hi", 16, False) for _ in range(4)], [_key("batch", 1)] * 4)
        rec.keep("litellm-429-key-max-parallel", answers, lambda a: a.status == 429 and LITELLM_SLOTS not in text(a),
                 "rate_limited", f"4 simultaneous requests on one batch key (max_parallel_requests=2), {why}")
        time.sleep(1)
        answers = [send(url, path, chat("hi", 4, False), _key("quota", 7)) for _ in range(4)]
        rec.keep("litellm-429-key-rpm", answers, lambda a: a.status == 429, "rate_limited",
                 f"4 requests in a row on one quota key (rpm_limit=2), {why}")
        answers = [send(url, path, chat("hi", 4, True), _key("quota", 8)) for _ in range(4)]
        rec.keep("litellm-429-stream-key-rpm", answers, lambda a: a.status == 429, "rate_limited",
                 f"4 streamed requests in a row on one quota key (rpm_limit=2), {why}")
        return rec.written
    finally:
        server.stop()


def record_gateway(out: Path, use: Releases) -> list[str]:
    """LiteLLM in front of the tiny vLLM: how the engine's 503s look behind the gateway."""
    limits = serve.VllmLimits(max_num_seqs=2, max_num_queued_reqs=4, max_num_queued_tokens=2000, max_model_len=2048)
    engine = serve.start_vllm(limits=limits, release_name=use.get("vllm"))
    try:
        tiers: dict[str, dict[str, int | None]] = {"interactive": {"max_parallel_requests": 100, "rpm_limit": None}}
        gateway = serve.start_litellm(deployment=serve.LitellmDeployment(max_parallel_requests=100,
                                                                          upstream=engine.url), tiers=tiers,
                                      release_name=use.get("litellm"))
        try:
            rec = Recorder(out, "litellm-vllm", f"{gateway.version}-{engine.version}", "litellm",
                           f"litellm proxy {gateway.version} → vllm {engine.version}")
            url, path = gateway.url, "/v1/chat/completions"
            why = (f"LiteLLM (no retries) → vLLM --max-num-seqs {limits.max_num_seqs} "
                   f"--max-num-queued-reqs {limits.max_num_queued_reqs}")
            rec.keep("gateway-200-stream-served", [send(url, path, chat("hello", 8, True), _key("interactive"))],
                     lambda a: a.status == 200 and "[DONE]" in text(a) and '"error"' not in text(a), "served",
                     "one streamed request through the gateway")
            answers = burst(url, path, [chat("hello there", 200, False) for _ in range(16)],
                            [_key("interactive", i) for i in range(16)])
            rec.keep("gateway-503-engine-queue-full", answers, lambda a: a.status >= 400 and VLLM_BUSY in text(a),
                     "queue_full", f"16 simultaneous requests, {why}")
            time.sleep(1)
            answers = burst(url, path, [chat("hello there", 200, True) for _ in range(16)],
                            [_key("interactive", i) for i in range(16)])
            rec.keep("gateway-stream-engine-queue-full", answers,
                     lambda a: a.status >= 400 and VLLM_BUSY in text(a), "queue_full",
                     f"16 simultaneous streamed requests, {why}")
            rec.keep("gateway-200-stream-in-band-engine-queue-full", answers,
                     lambda a: in_band(a) and VLLM_BUSY in text(a), "queue_full",
                     f"16 simultaneous streamed requests, {why}: the engine's error inside the gateway's 200 stream")
            return rec.written
        finally:
            gateway.stop()
    finally:
        engine.stop()


TOOLS = [{"type": "function", "function": {
    "name": "run_command", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def record_vllm_tools(out: Path, use: Releases) -> list[str]:
    """Tool calls as vLLM streams them (hermes parser; ``tool_choice: required``, so the random model calls)."""
    server = serve.start_vllm(tool_call_parser="hermes", release_name=use.get("vllm"))
    try:
        rec = Recorder(out, "vllm", server.version, "vllm", "vllm", cases="vllm-200-*tool-call.json")
        url, path = server.url, "/v1/chat/completions"
        how = "--enable-auto-tool-choice --tool-call-parser hermes; tools [run_command], tool_choice required"
        for stream in (True, False):
            case = "vllm-200-stream-tool-call" if stream else "vllm-200-tool-call"
            # the random model rarely closes the call's JSON before max_tokens: seeds are tried in order
            # until one ends with finish_reason tool_calls (seed 8 did for both, recorded 2026-12-01)
            answers = []
            for seed in range(40):
                answers.append(send(url, path, chat("list the files", 96, stream, tools=TOOLS,
                                                    tool_choice="required", seed=seed)))
                if '"finish_reason":"tool_calls"' in text(answers[-1]):
                    break
            rec.keep(case, answers, lambda a: a.status == 200 and '"finish_reason":"tool_calls"' in text(a), "served",
                     f"{how}, seed {len(answers) - 1}")
        # vLLM's Anthropic Messages endpoint: a tool_use block, input_json_delta fragments, stop_reason tool_use
        tools = [{"name": t["function"]["name"], "description": t["function"]["description"],  # type: ignore[index]
                  "input_schema": t["function"]["parameters"]} for t in TOOLS]  # type: ignore[index]
        answers = []
        for seed in range(40):
            body: dict[str, object] = {"model": serve.MODEL_NAME, "max_tokens": 96, "stream": True, "seed": seed,
                                       "messages": [{"role": "user", "content": "list the files"}],
                                       "tools": tools, "tool_choice": {"type": "any"}}
            answers.append(send(url, "/v1/messages", body))
            if '"stop_reason":"tool_use"' in text(answers[-1]):
                break
        rec.keep("vllm-200-stream-messages-tool-call", answers,
                 lambda a: a.status == 200 and '"stop_reason":"tool_use"' in text(a), "served",
                 f"--enable-auto-tool-choice --tool-call-parser hermes; /v1/messages, tools [run_command], "
                 f"tool_choice any, seed {len(answers) - 1}")
        return rec.written
    finally:
        server.stop()


VLLM_NO_TOOLS = "tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"


def record_vllm_no_tools(out: Path, use: Releases) -> list[str]:
    """What vLLM started without a tool-call parser answers a request that offers tools (as agents send them)."""
    server = serve.start_vllm(release_name=use.get("vllm"))
    try:
        rec = Recorder(out, "vllm", server.version, "vllm", "vllm", cases="vllm-400-*tools-refused.json")
        url, path = server.url, "/v1/chat/completions"
        how = "no --enable-auto-tool-choice / --tool-call-parser; tools [run_command], no tool_choice (auto)"
        for stream in (True, False):
            case = "vllm-400-stream-tools-refused" if stream else "vllm-400-tools-refused"
            rec.keep(case, [send(url, path, chat("list the files", 16, stream, tools=TOOLS))],
                     lambda a: a.status == 400 and VLLM_NO_TOOLS in text(a), "failed", how)
        return rec.written
    finally:
        server.stop()


JOB_ENGINES = {"vllm": ("vllm",), "vllm-tools": ("vllm",), "vllm-no-tools": ("vllm",), "litellm": ("litellm",),
               "gateway": ("vllm", "litellm")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", default="all",
                        choices=["vllm", "vllm-tools", "vllm-no-tools", "litellm", "gateway", "all"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--release", action="append", default=[],
                        help="record this release of engines/releases.toml (vllm-0.31.0) instead of its engine's "
                             "pinned one; once per engine")
    args = parser.parse_args(argv)
    jobs = {"vllm": record_vllm, "vllm-tools": record_vllm_tools, "vllm-no-tools": record_vllm_no_tools,
            "litellm": record_litellm,
            "gateway": record_gateway}
    try:
        use: Releases = {}
        for name in args.release:
            release = serve.release(name.split("-", 1)[0], name)
            use[release.engine] = release.name
        for name, job in jobs.items():
            # "all" with --release: the jobs whose every engine is a chosen release (the pinned folders stay)
            chosen = set(use) or set(JOB_ENGINES[name])
            if args.which == name or (args.which == "all" and set(JOB_ENGINES[name]) <= chosen):
                print(f"{name}:")
                job(args.out, use)
    except serve.EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
