"""Cross-check per stack profile: vLLM's and LiteLLM's own counters against the client's counts.

The metrics pages are written as the servers print them (vLLM 0.32.0 ``vllm/v1/metrics/loggers.py``,
LiteLLM ``integrations/prometheus.py``) and go through the real scraper parser and metrics loader.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rushhour.audit.crosscheck import crosscheck
from rushhour.audit.metrics import load_metrics
from rushhour.audit.summary import Finding
from rushhour.loadgen.scrape import parse_metrics_text, profile_filter

S = 1_000_000_000
BUSY = "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance."
BACKLOG = "The engine has reached its prefill token backlog limit. Please try again later or on a different instance."

VLLM_BEFORE = """\
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0
# HELP vllm:admission_rejections_total Number of admission attempts rejected by a queue limit, by reason.
# TYPE vllm:admission_rejections_total counter
vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_reqs"} 0.0
vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_tokens"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
"""

VLLM_AFTER = """\
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 10.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 7.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 3.0
# TYPE vllm:admission_rejections_total counter
vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_reqs"} 5.0
vllm:admission_rejections_total{model_name="tiny",reason="max_num_queued_tokens"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
"""

LITELLM_AFTER = """\
# TYPE litellm_proxy_total_requests_metric_total counter
litellm_proxy_total_requests_metric_total{api_key_alias="interactive",status_code="200",team="None"} 4.0
litellm_proxy_total_requests_metric_total{api_key_alias="batch",status_code="200",team="None"} 2.0
litellm_proxy_total_requests_metric_total{api_key_alias="batch",status_code="429",team="None"} 5.0
# TYPE litellm_proxy_failed_requests_metric_total counter
litellm_proxy_failed_requests_metric_total{api_key_alias="batch",exception_class="RateLimitError",\
exception_status="429"} 2.0
litellm_proxy_failed_requests_metric_total{api_key_alias="batch",exception_class="HTTPException",\
exception_status="429"} 3.0
"""


def _write_scrapes(run_dir: Path, profile: str, pages: list[tuple[int, str]]) -> None:
    keep = profile_filter(profile)
    with (run_dir / "metrics.jsonl").open("w") as out:
        for ts_ns, text in pages:
            samples = [s.to_json() for s in parse_metrics_text(text, keep=keep)]
            out.write(json.dumps({"ts_ns": ts_ns, "clock": "anchor", "samples": samples}) + "\n")


def _attempts(rows: list[tuple[str, int, str, bool]], texts: Sequence[str | None] | None = None) -> pd.DataFrame:
    """(tier, status, class, in flight at the end) per attempt, sent one second apart from t=1 s; ``texts``:
    the server's error text per attempt (in-band when the status is 200)."""
    n = len(rows)
    texts = texts or [None] * n
    return pd.DataFrame({
        "error": pd.Categorical([t if r[1] != 200 else None for r, t in zip(rows, texts, strict=True)]),
        "in_band_error": [t if r[1] == 200 else None for r, t in zip(rows, texts, strict=True)],
        "tier": [r[0] for r in rows],
        "status": np.array([r[1] for r in rows], dtype=np.int64),
        "cls": [r[2] for r in rows],
        "not_sent": np.zeros(n, dtype=bool),
        "route": ["primary"] * n,
        "sent_ns": np.arange(1, n + 1, dtype=np.float64) * S,
        "t_end_ns": np.array([(100 if r[3] else i + 2) * S for i, r in enumerate(rows)], dtype=np.float64),
        "first_token_ns": [float(i + 1.5) * S if r[2] == "served" else np.nan for i, r in enumerate(rows)],
        "reason": [None] * n,
    })


def _vllm_client(served: int, busy_503: int, busy_in_band: int, backlog: int) -> pd.DataFrame:
    tiers = ["interactive", "batch"]
    rows = [(tiers[i % 2], 200, "served", False) for i in range(served)]
    rows += [(tiers[i % 2], 503, "queue_full", False) for i in range(busy_503 + backlog)]
    rows += [(tiers[i % 2], 200, "queue_full", False) for i in range(busy_in_band)]
    texts = [None] * served + [BUSY] * busy_503 + [BACKLOG] * backlog + [BUSY] * busy_in_band
    return _attempts(rows, texts)


@pytest.mark.parametrize("probes", [False, True])
def test_vllm_totals_match(tmp_path: Path, probes: bool) -> None:
    _write_scrapes(tmp_path, "vllm", [(0, VLLM_BEFORE), (60 * S, VLLM_AFTER)])
    metrics = load_metrics(tmp_path, None)
    attempts = _vllm_client(served=12 - (2 if probes else 0), busy_503=3, busy_in_band=2, backlog=1)
    probe_rows = _attempts([("interactive", 200, "served", False)] * 2) if probes else None
    checks, findings = crosscheck(attempts, {"interactive": 10, "batch": 0}, metrics, profile="vllm",
                                  probes=probe_rows)
    by_metric = {c.metric: c for c in checks}
    served = by_metric["vllm:request_success_total"]
    assert (served.tier, served.priority, served.client, served.server) == ("all", None, 12, 12.0)
    rejected = by_metric["vllm:admission_rejections_total"]
    assert (rejected.client, rejected.server) == (6, 6.0)  # 503s and in-band errors, both reasons
    by_reason = by_metric["vllm:admission_rejections_total{reason=max_num_queued_reqs}"]
    assert (by_reason.client, by_reason.server) == (5, 5.0)  # "currently busy": 3 × 503 + 2 in-band
    by_reason = by_metric["vllm:admission_rejections_total{reason=max_num_queued_tokens}"]
    assert (by_reason.client, by_reason.server) == (1, 1.0)  # "prefill token backlog"
    assert all(c.matches for c in checks) and findings == []


def test_vllm_mismatch_is_a_finding(tmp_path: Path) -> None:
    """The issue's run: vLLM counted rejections the client had not classified as queue_full."""
    _write_scrapes(tmp_path, "vllm", [(0, VLLM_BEFORE), (60 * S, VLLM_AFTER)])
    attempts = _vllm_client(served=12, busy_503=0, busy_in_band=0, backlog=0)
    failed = _attempts([("interactive", 503, "failed", False)] * 6, [BUSY] * 5 + [BACKLOG])
    checks, findings = crosscheck(pd.concat([attempts, failed], ignore_index=True),
                                  {"interactive": 10, "batch": 0}, load_metrics(tmp_path, None), profile="vllm")
    # served matches; the class count does not, though the texts say which limit each one was
    assert [c.matches for c in checks] == [True, False, True, True]
    assert len(findings) == 1 and findings[0].kind == "crosscheck"
    assert findings[0].message.startswith("all: client counted 0 queue_full but the server's "
                                          "vllm:admission_rejections_total rose by 6 in total")


def test_vllm_in_flight_is_the_tolerance(tmp_path: Path) -> None:
    _write_scrapes(tmp_path, "vllm", [(0, VLLM_BEFORE), (60 * S, VLLM_AFTER)])
    attempts = _attempts([("batch", 200, "served", False)] * 10 + [("batch", 200, "served", True)] * 2)
    checks, _ = crosscheck(attempts, {"batch": 0}, load_metrics(tmp_path, None), profile="vllm")
    served = next(c for c in checks if c.metric == "vllm:request_success_total")
    assert served.client == 12 and served.matches
    short = _attempts([("batch", 200, "served", False)] * 9)
    checks, findings = crosscheck(short, {"batch": 0}, load_metrics(tmp_path, None), profile="vllm")
    assert not next(c for c in checks if c.metric == "vllm:request_success_total").matches
    assert findings


def test_litellm_per_key_alias(tmp_path: Path) -> None:
    """LiteLLM labels its counters by key alias: named like the tiers, the check is per tier."""
    _write_scrapes(tmp_path, "litellm", [(60 * S, LITELLM_AFTER)])  # a fresh proxy: no baseline scrape
    rows = [("interactive", 200, "served", False)] * 4 + [("batch", 200, "served", False)] * 2
    rows += [("batch", 429, "queue_full", False)] * 2 + [("batch", 429, "rate_limited", False)] * 3
    checks, findings = crosscheck(_attempts(rows), {"interactive": 10, "batch": 0}, load_metrics(tmp_path, None),
                                  profile="litellm")
    got = {(c.tier, c.metric.replace("{status_code=200}", "")): (c.client, c.server, c.matches) for c in checks}
    assert got == {
        ("interactive", "litellm_proxy_total_requests_metric_total"): (4, 4.0, True),
        ("batch", "litellm_proxy_total_requests_metric_total"): (2, 2.0, True),
        ("batch", "litellm_proxy_failed_requests_metric_total{exception_status=429}"): (5, 5.0, True),
        ("batch", "litellm_proxy_failed_requests_metric_total{exception_status=429,exception_class=RateLimitError}"):
            (2, 2.0, True),
        ("batch", "litellm_proxy_failed_requests_metric_total{exception_status=429,exception_class=HTTPException}"):
            (3, 3.0, True),
    }
    assert findings == []


def test_litellm_unlabelled_tiers_compare_in_total(tmp_path: Path) -> None:
    _write_scrapes(tmp_path, "litellm", [(60 * S, LITELLM_AFTER)])
    rows = [("gold", 200, "served", False)] * 6 + [("bronze", 429, "queue_full", False)] * 2
    rows += [("bronze", 429, "rate_limited", False)] * 2  # the server counted 3 quota 429s
    checks, findings = crosscheck(_attempts(rows), {"gold": 1, "bronze": 0}, load_metrics(tmp_path, None),
                                  profile="litellm")
    assert [(c.tier, c.client, c.server, c.matches) for c in checks] == [
        ("all", 6, 6.0, True), ("all", 4, 5.0, False), ("all", 2, 2.0, True), ("all", 2, 3.0, False)]
    assert len(findings) == 2 and "status:429" in findings[0].message and "rate_limited" in findings[1].message


def test_a_counter_the_server_lacks_is_named_never_taken_for_agreement(tmp_path: Path) -> None:
    """No counter, no check: but the client's 3 served have no server count to agree with, and the audit says
    so (an older release without the family, a metric turned off) rather than staying silent."""
    page = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
    _write_scrapes(tmp_path, "vllm", [(60 * S, page)])
    checks, findings = crosscheck(_vllm_client(3, 0, 0, 0), {"interactive": 1, "batch": 0},
                                  load_metrics(tmp_path, None), profile="vllm")
    assert checks == []
    served = [f for f in findings if f.data.get("metric") == "vllm:request_success_total"]
    assert [f.kind for f in findings] == ["crosscheck_unmeasured"] and len(served) == 1
    assert "not cross-checked" in served[0].message and "3 served" in served[0].message


def _mismatches(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.kind == "crosscheck"]


def test_a_server_with_earlier_traffic_is_compared_from_the_baseline(tmp_path: Path) -> None:
    """As in a real run against vLLM 0.32: the calibration probes ended before the first scrape, and the
    server had served 40 other requests before; only what ended after the baseline scrape is compared."""
    before = VLLM_BEFORE.replace('finished_reason="stop",model_name="tiny"} 4.0',
                                 'finished_reason="stop",model_name="tiny"} 49.0')
    after = VLLM_AFTER.replace('finished_reason="stop",model_name="tiny"} 10.0',
                               'finished_reason="stop",model_name="tiny"} 55.0')
    _write_scrapes(tmp_path, "vllm", [(int(0.5 * S), before), (60 * S, after)])
    probes = _attempts([("interactive", 200, "served", False)] * 2)  # ended at 0.2 s and 0.3 s
    probes["sent_ns"] = [0.1 * S, 0.2 * S]
    probes["t_end_ns"] = [0.2 * S, 0.3 * S]
    attempts = _vllm_client(served=12, busy_503=3, busy_in_band=2, backlog=1)
    checks, findings = crosscheck(attempts, {"interactive": 10, "batch": 0}, load_metrics(tmp_path, None),
                                  profile="vllm", probes=probes)
    served = next(c for c in checks if c.metric == "vllm:request_success_total")
    assert (served.client, served.server, served.matches) == (12, 12.0, True)
    assert findings == []


def test_litellm_scrapes_are_not_load(tmp_path: Path) -> None:
    """The scraper authenticates with a tier's key: if the proxy counts its /metrics requests, they are no load."""
    page = LITELLM_AFTER + ('litellm_proxy_total_requests_metric_total{api_key_alias="interactive",'
                            'route="/metrics/",status_code="200",team="None"} 30.0\n')
    _write_scrapes(tmp_path, "litellm", [(60 * S, page)])
    rows = [("interactive", 200, "served", False)] * 4 + [("batch", 200, "served", False)] * 2
    rows += [("batch", 429, "queue_full", False)] * 2 + [("batch", 429, "rate_limited", False)] * 3
    checks, findings = crosscheck(_attempts(rows), {"interactive": 10, "batch": 0}, load_metrics(tmp_path, None),
                                  profile="litellm")
    assert all(c.matches for c in checks) and findings == []


def test_litellm_a_tier_without_a_series_is_compared_with_zero(tmp_path: Path) -> None:
    """batch has 200s on the client, none on the server: a mismatch, not a tier left out."""
    page = LITELLM_AFTER.replace('api_key_alias="batch",status_code="200"', 'api_key_alias="other",status_code="200"')
    _write_scrapes(tmp_path, "litellm", [(60 * S, page)])
    rows = [("interactive", 200, "served", False)] * 4 + [("batch", 200, "served", False)] * 2
    rows += [("batch", 429, "rate_limited", False)] * 5
    checks, findings = crosscheck(_attempts(rows), {"interactive": 10, "batch": 0}, load_metrics(tmp_path, None),
                                  profile="litellm")
    batch = next(c for c in checks if c.tier == "batch" and c.metric.startswith(
        "litellm_proxy_total_requests_metric_total"))
    assert (batch.client, batch.server, batch.matches) == (2, 0.0, False)
    assert any(f.tier == "batch" for f in findings)


def test_a_counter_created_by_its_first_event_starts_from_zero(tmp_path: Path) -> None:
    """A fresh LiteLLM proxy has no litellm_proxy_* series until its first request: the scrapes before
    that are the baseline (value 0), not the first scrape that shows the series (seen in a real run)."""
    empty = "# TYPE litellm_in_flight_requests gauge\nlitellm_in_flight_requests 0.0\n"
    early = ('litellm_proxy_total_requests_metric_total{api_key_alias="interactive",status_code="200"} 1.0\n')
    _write_scrapes(tmp_path, "litellm", [(0, empty), (int(2.5 * S), early), (60 * S, LITELLM_AFTER)])
    rows = [("interactive", 200, "served", False)] * 4 + [("batch", 200, "served", False)] * 2
    rows += [("batch", 429, "queue_full", False)] * 2 + [("batch", 429, "rate_limited", False)] * 3
    checks, findings = crosscheck(_attempts(rows), {"interactive": 10, "batch": 0}, load_metrics(tmp_path, None),
                                  profile="litellm")
    served = next(c for c in checks if c.tier == "interactive")
    assert (served.client, served.server) == (4, 4.0)
    assert all(c.matches for c in checks) and findings == []


def test_twin_priorities_follow_the_stacks_wire() -> None:
    """Where the server files the priority control's twins: the stack's default on a header stack without an
    objective; a tier's priority for that tier's objective; unknown for an objective only the server knows."""
    from rushhour.audit.crosscheck import twin_priorities
    from rushhour.scenarios import parse_scenario

    def scenario(control: str) -> str:
        return f"""
name: t
target: {{url: testbed, profile: llm-d}}
control: {control}
tiers:
  - {{name: interactive, priority: 100}}
  - {{name: batch, priority: -1, objective: batch-sheddable}}
personas:
  - {{kind: chat, name: a, tier: interactive, arrival: {{process: poisson, rate: 1}}}}
phases:
  - {{name: main, duration: 5s}}
"""

    plain = parse_scenario(scenario("{share: 0.5}"))
    assert twin_priorities(plain, "llm-d") == {"interactive": 0, "batch": 0}
    assert twin_priorities(plain, "gaie-v1") == {"interactive": 0, "batch": 0}
    assert twin_priorities(plain, "vllm") == {"interactive": 49, "batch": 49}  # the neutral priority
    named = parse_scenario(scenario("{share: 0.5, objective: batch-sheddable}"))
    assert twin_priorities(named, "llm-d") == {"interactive": -1, "batch": -1}
    foreign = parse_scenario(scenario("{share: 0.5, objective: premium}"))
    assert twin_priorities(foreign, "llm-d") == {"interactive": None, "batch": None}
    assert twin_priorities(None, "llm-d") == {}


def _revocations_page(by_priority: dict[int, float]) -> str:
    lines = ["# TYPE llm_d_epp_flow_control_revocations_issued_total counter"]
    lines += [f'llm_d_epp_flow_control_revocations_issued_total{{inference_pool="p",priority="{p}"}} {n}'
              for p, n in by_priority.items()]
    return "\n".join(lines) + "\n"


def test_llmd_revocations_per_priority_match_the_429_path(tmp_path: Path) -> None:
    """llm-d's revocations per victim priority against the client's preempted (429 evicted) per tier."""
    _write_scrapes(tmp_path, "llm-d", [(0, _revocations_page({})), (60 * S, _revocations_page({-1: 3.0, -5: 1.0}))])
    rows = [("batch", 429, "preempted", False)] * 3 + [("bulk", 429, "preempted", False)]
    rows += [("interactive", 200, "served", False)] * 4
    checks, findings = crosscheck(_attempts(rows), {"interactive": 100, "batch": -1, "bulk": -5},
                                  load_metrics(tmp_path, None), profile="llm-d")
    got = {(c.tier, c.priority): (c.client, c.server, c.matches) for c in checks
           if c.metric == "llm_d_epp_flow_control_revocations_issued_total"}
    assert got == {("batch", -1): (3, 3.0, True), ("bulk", -5): (1, 1.0, True)}
    assert _mismatches(findings) == []


def test_llmd_revoked_streams_are_tolerance_not_counted(tmp_path: Path) -> None:
    """A revoked stream is cut after its 200 (class failed, like a network cut): it may be one of the server's
    revocations or not, so it widens the tolerance; without it the mismatch is a finding."""
    _write_scrapes(tmp_path, "llm-d", [(0, _revocations_page({})), (60 * S, _revocations_page({-1: 3.0}))])
    rows = [("batch", 429, "preempted", False)] * 2 + [("batch", 200, "failed", False)]
    checks, findings = crosscheck(_attempts(rows), {"batch": -1}, load_metrics(tmp_path, None), profile="llm-d")
    (check,) = [c for c in checks if c.metric == "llm_d_epp_flow_control_revocations_issued_total"]
    assert (check.client, check.server, check.matches) == (2, 3.0, True) and _mismatches(findings) == []
    rows = [("batch", 429, "preempted", False)] * 2 + [("batch", 200, "served", False)]
    checks, findings = crosscheck(_attempts(rows), {"batch": -1}, load_metrics(tmp_path, None), profile="llm-d")
    (check,) = [c for c in checks if c.metric == "llm_d_epp_flow_control_revocations_issued_total"]
    assert (check.client, check.server, check.matches) == (2, 3.0, False)
    assert len(_mismatches(findings)) == 1 and "preempted" in _mismatches(findings)[0].message
