"""The scraper against a real aiohttp server on loopback: 307 redirects, a bearer credential, 401, per-profile
selection (LiteLLM answers /metrics with a 307 to /metrics/ and 401 when auth is on)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from rushhour.loadgen.scrape import MetricsScraper, ScrapeError, fetch, metrics_url, profile_filter, read_credential
from rushhour.records.record import Anchor

TOKEN = "sk-metrics-0123456789abcdef"

PAGE = """\
# TYPE litellm_proxy_total_requests_metric counter
litellm_proxy_total_requests_metric_total{api_key_alias="interactive",status_code="200",team="t"} 7.0
litellm_proxy_total_requests_metric_total{api_key_alias="batch",status_code="429",team="t"} 3.0
# TYPE litellm_proxy_failed_requests_metric counter
litellm_proxy_failed_requests_metric_total{api_key_alias="batch",exception_status="429",exception_class="X"} 3.0
# TYPE vllm:admission_rejections counter
vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_reqs"} 5.0
vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_tokens"} 1.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 9.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 2.0
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
"""


@dataclass
class Server:
    """Two loopback apps: ``url`` (redirects, wants the token) and ``other`` (another origin)."""

    url: str = ""
    other: str = ""
    seen_auth: list[str | None] = field(default_factory=list)  # Authorization headers the other origin got


@pytest.fixture()
def server() -> Iterator[Server]:
    state = Server()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runners: list[web.AppRunner] = []

    async def metrics_redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect("/metrics/")  # what LiteLLM's proxy answers

    async def metrics(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"error": {"message": "Authentication Error", "type": "auth_error",
                                                "param": None, "code": "401"}}, status=401)
        return web.Response(text=PAGE, content_type="text/plain")

    async def away(request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect(state.other + "/metrics")

    async def loop_forever(request: web.Request) -> web.StreamResponse:
        raise web.HTTPTemporaryRedirect("/loop")

    async def other(request: web.Request) -> web.StreamResponse:
        state.seen_auth.append(request.headers.get("Authorization"))
        return web.Response(text=PAGE, content_type="text/plain")

    async def start() -> None:
        main = web.Application()
        main.router.add_get("/metrics", metrics_redirect)
        main.router.add_get("/metrics/", metrics)
        main.router.add_get("/away", away)
        main.router.add_get("/loop", loop_forever)
        second = web.Application()
        second.router.add_get("/metrics", other)
        for app, attr in ((main, "url"), (second, "other")):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            setattr(state, attr, f"http://127.0.0.1:{port}")
            runners.append(runner)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "aiohttp test server did not start"
    try:
        yield state
    finally:
        async def stop() -> None:
            for runner in runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_follows_the_redirect_and_sends_the_bearer_token(server: Server) -> None:
    text = fetch(server.url + "/metrics", 10.0, token=TOKEN)
    assert "litellm_proxy_total_requests_metric_total" in text


def test_401_is_one_clear_line_without_the_token(server: Server) -> None:
    with pytest.raises(ScrapeError) as no_cred:
        fetch(server.url + "/metrics", 10.0)
    assert str(no_cred.value) == ("http 401 Unauthorized: the metrics endpoint wants a credential "
                                  "(target.metrics.credential: env:VAR)")
    with pytest.raises(ScrapeError) as wrong:
        fetch(server.url + "/metrics", 10.0, token="sk-wrong-token-000000", credential_name="env:METRICS_KEY")
    assert str(wrong.value) == "http 401 Unauthorized: the metrics endpoint refused the credential env:METRICS_KEY"
    assert "sk-wrong" not in str(wrong.value)


def test_token_is_not_sent_to_another_origin(server: Server) -> None:
    fetch(server.url + "/away", 10.0, token=TOKEN)
    assert server.seen_auth == [None]


def test_redirect_loop_is_bounded(server: Server) -> None:
    with pytest.raises(ScrapeError, match="more than 5 redirects"):
        fetch(server.url + "/loop", 10.0)


def test_scraper_keeps_what_the_profile_reads(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "metrics.jsonl"
    scraper = MetricsScraper(server.url + "/metrics", 0.05, 5.0, out, Anchor.now(), keep=profile_filter("litellm"),
                             token=TOKEN, credential_name="env:METRICS_KEY", max_scrapes=2)
    scraper.run()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 and all("error" not in line for line in lines)
    names = {s["name"] for s in lines[0]["samples"]}
    assert names == {"litellm_proxy_total_requests_metric_total", "litellm_proxy_failed_requests_metric_total"}
    assert scraper.report() is None
    assert TOKEN not in out.read_text()

    vllm_out = tmp_path / "vllm.jsonl"
    MetricsScraper(server.url + "/metrics", 0.05, 5.0, vllm_out, Anchor.now(), keep=profile_filter("vllm"),
                   token=TOKEN, max_scrapes=1).run()
    names = {s["name"] for s in json.loads(vllm_out.read_text())["samples"]}
    assert names == {"vllm:admission_rejections_total", "vllm:request_success_total"}


def test_scraper_reports_401_and_pages_it_cannot_use(server: Server, tmp_path: Path) -> None:
    denied = MetricsScraper(server.url + "/metrics", 0.05, 5.0, tmp_path / "a.jsonl", Anchor.now(),
                            keep=profile_filter("litellm"), max_scrapes=1)
    denied.run()
    assert denied.report() == (f"metrics: 1 of 1 scrapes of {server.url}/metrics failed (last: http 401 "
                               "Unauthorized: the metrics endpoint wants a credential "
                               "(target.metrics.credential: env:VAR))")
    foreign = MetricsScraper(server.url + "/metrics", 0.05, 5.0, tmp_path / "b.jsonl", Anchor.now(),
                             keep=profile_filter("openai"), token=TOKEN, max_scrapes=1)
    foreign.run()
    line = json.loads((tmp_path / "b.jsonl").read_text())
    assert line["samples"] == [] and line["seen"] == 8
    assert "none of the families this stack profile reads" in (foreign.report() or "")


def test_metrics_url_and_credential_forms() -> None:
    assert metrics_url("http://h:4000", "auto") == "http://h:4000/metrics"
    assert metrics_url("http://h:4000/", "/metrics/") == "http://h:4000/metrics/"
    assert metrics_url("http://h:4000", "http://other:9090/metrics") == "http://other:9090/metrics"
    assert metrics_url("http://h:4000", None) is None
    assert read_credential("env:K", {"K": "v"}) == "v"
    with pytest.raises(ValueError, match="not set"):
        read_credential("env:K", {})
    with pytest.raises(ValueError, match="env:VARIABLE"):
        read_credential("sk-literal")


def test_scenario_metrics_block() -> None:
    from rushhour.scenarios.model import MetricsOptions

    opts = MetricsOptions.model_validate({"url": "/metrics/", "credential": "env:LITELLM_KEY", "interval_s": "2s"})
    assert (opts.url, opts.credential, opts.interval_s) == ("/metrics/", "env:LITELLM_KEY", 2.0)
    with pytest.raises(ValueError, match="env:VARIABLE"):
        MetricsOptions.model_validate({"credential": "sk-literal-key"})
    with pytest.raises(ValueError, match="user or password"):
        MetricsOptions.model_validate({"url": "http://u:p@h/metrics"})


def test_testbed_health_is_kept_for_a_testbed_target_and_bad_cli_input_is_one_line() -> None:
    import subprocess
    import sys

    assert profile_filter("vllm", testbed=True)("testbed_step_lag_seconds")
    assert not profile_filter("vllm")("testbed_step_lag_seconds")
    assert profile_filter("litellm", testbed=True)("vllm:num_requests_waiting")  # the testbed imitates vLLM
    assert not profile_filter("litellm")("vllm:num_requests_waiting")
    for args, text in ((["--profile", "nope"], "unknown stack profile 'nope'"),
                       (["--credential", "sk-literal"], "env:VARIABLE")):
        proc = subprocess.run([sys.executable, "-m", "rushhour.loadgen.scrape", "http://127.0.0.1:9/metrics",
                               "/dev/null", "--max-scrapes", "1", *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr
