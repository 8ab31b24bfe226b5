"""An audited run as llm-d-benchmark's "benchmark report" v0.2 (BR0.2), written from the summary and attempts table.

The format is llm-d-benchmark's ``benchmark_report/schema_v0_2.py`` (Apache-2.0, github.com/llm-d/llm-d-benchmark,
``llmdbenchmark/analysis/benchmark_report/``); docs/reports.md maps every field. BR0.2 describes one class of
traffic: the run-wide figures go where it expects them, each tier's under ``results.observability.rushhour`` (the
schema's one place that takes fields of a tool's own: ``Observability`` allows extra keys, and llm-d-benchmark's
own eval-containers converter puts its task results there). Fail closed: a figure rushhour did not measure is
left out, never written as 0.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pandas as pd
import yaml

from rushhour.audit.phases import measured_mask
from rushhour.audit.summary import UNSERVED_CLASSES, Percentiles, Summary, TierSummary

BR_VERSION = "0.2"
# llm-d-benchmark names a v0.2 report ``benchmark_report_v0.2,_<source file>.yaml`` in the results folder
# (llmdbenchmark/analysis/__init__.py run_analysis); its cross-treatment summary globs ``benchmark_report_v0.2*.yaml``
BR02_FILE = "benchmark_report_v0.2,_rushhour.yaml"
EXTENSION = "rushhour"  # the key under results.observability
EXTENSION_SCHEMA = "rushhour.br02/1"
COMPONENT_SCHEMA = "0.0.1"  # BR0.2's ComponentMetadata / LoadMetadata schema_version

# BR0.2's Statistics percentiles, by its field names
QUANTILES = {"p0p1": 0.001, "p1": 0.01, "p5": 0.05, "p10": 0.10, "p25": 0.25, "p50": 0.50, "p75": 0.75,
             "p90": 0.90, "p95": 0.95, "p99": 0.99, "p99p9": 0.999}
# Not served because no whole answer came (the client stopped waiting, the connection broke, the run ended):
# BR0.2's ``incomplete``; every other class not served had an error answer: its ``failures``
INCOMPLETE_CLASSES = ("timeout", "transport", "cancelled", "abandoned", "unfinished")
FAILURE_CLASSES = tuple(c for c in UNSERVED_CLASSES if c not in INCOMPLETE_CLASSES)
NS_PER_MS = 1e6
_TABLE_COLUMNS = ("logical_id", "tier", "class", "probe", "intended_ns", "ttft_ns", "tpot_ns", "e2e_ns",
                  "prompt_tokens", "output_tokens")


def render_br02(summary: Summary, table: pd.DataFrame | None, experiment_id: str | None = None) -> dict[str, Any]:
    """The BR0.2 document of an audited run (``table``: the audit's attempts table; None: no run-wide latency;
    ``experiment_id``: llm-d-benchmark's, which names ``run.eid`` as its own converters do)."""
    served = _served_in_window(summary, table) if table is not None else None
    report: dict[str, Any] = {
        "version": BR_VERSION,
        "run": _run(summary, experiment_id),
        "scenario": _scenario(summary, served),
        "results": {
            "request_performance": {"aggregate": _aggregate(summary, served)},
            "observability": _observability(summary),
        },
    }
    return _pruned(report)


def render_br02_yaml(summary: Summary, table: pd.DataFrame | None, experiment_id: str | None = None) -> str:
    """The BR0.2 document as YAML, the form llm-d-benchmark reads (``yaml.safe_load``)."""
    return yaml.safe_dump(render_br02(summary, table, experiment_id), sort_keys=False, allow_unicode=True, width=120)


def statistics(values: np.ndarray | list[float], units: str) -> dict[str, Any] | None:
    """BR0.2 ``Statistics`` of the finite values (mean, stddev, min, every named percentile, max); None if none."""
    arr = np.asarray(values, dtype=np.float64)
    arr = np.sort(arr[np.isfinite(arr)])
    if not len(arr):
        return None
    qs = np.quantile(arr, list(QUANTILES.values()))  # numpy's linear method, as the audit's percentiles
    return {"units": units, "mean": float(arr.mean()), "stddev": float(arr.std()), "min": float(arr[0]),
            **{name: float(q) for name, q in zip(QUANTILES, qs, strict=True)}, "max": float(arr[-1])}


def _pruned(value: Any) -> Any:
    """Nones and empty mappings left out: BR0.2 says 'not measured' by absence, as its own ``dump`` does."""
    if isinstance(value, dict):
        out = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _safe_url(url: str) -> str:
    """The target without userinfo, query or fragment: no credential leaves in a report."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    if not parts.scheme or not parts.hostname:
        return url.split("?")[0].split("#")[0].rsplit("@", 1)[-1]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return urlunsplit((parts.scheme, host + (f":{port}" if port else ""), parts.path, "", ""))


def experiment_uid(experiment_id: str) -> str:
    """``run.eid`` of an llm-d-benchmark experiment: its converters' uuid5 of the experiment id (URL namespace)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, experiment_id))


def _run(summary: Summary, experiment_id: str | None) -> dict[str, Any]:
    info = summary.run
    time: dict[str, Any] = {}
    try:
        start = datetime.fromisoformat(info.started_at.replace("Z", "+00:00"))
    except ValueError:
        start = None
    if start is not None:
        time["start"] = start.isoformat()
        if info.duration_s >= 0:
            time["end"] = (start + timedelta(seconds=info.duration_s)).isoformat()
    if info.duration_s >= 0:
        time["duration"] = f"PT{info.duration_s:.3f}S"  # ISO-8601 duration, as llm-d-benchmark writes it
    eid = experiment_uid(experiment_id.strip()) if experiment_id and experiment_id.strip() else None
    return {"uid": info.run_id, "eid": eid, "time": time, "description": info.description or None}


def _stack(summary: Summary) -> list[dict[str, Any]]:
    """The target as one BR0.2 component: ``generic`` (rushhour knows the stack's profile, not its hardware)."""
    info = summary.run
    config = {"profile": info.profile, "target": _safe_url(info.target), "model": info.model,
              "testbed": info.testbed}
    config = {k: v for k, v in config.items() if v}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:32]
    return [{
        "metadata": {"schema_version": COMPONENT_SCHEMA, "label": "target", "cfg_id": digest,
                     "description": "the stack rushhour's load was sent to (its profile, model and address)"},
        # tool_version is required and rushhour does not learn the server's version: empty, as llm-d-benchmark's own
        # converters write a version they do not know
        "standardized": {"kind": "generic", "tool": info.profile, "tool_version": "", "model": info.model},
        "native": {"config": config},
    }]


def _scenario(summary: Summary, served: pd.DataFrame | None) -> dict[str, Any]:
    return {"stack": _stack(summary), "load": _load(summary, served)}


def _load(summary: Summary, served: pd.DataFrame | None) -> dict[str, Any] | None:
    """BR0.2's workload: the tool, the processes and the measured prompt lengths (required: none measured, none)."""
    info = summary.run
    version = info.versions.get("rushhour")
    prompts = _column(served, "prompt_tokens")
    if version is None or prompts is None:
        return None
    native = {"scenario": info.scenario, "mode": info.mode, "seed": info.seed, "phases": info.phases,
              "drain_s": info.drain_s, "measured_phases": summary.measurement.measured_phases,
              "excluded_phases": summary.measurement.excluded_phases}
    return {
        "metadata": {"schema_version": COMPONENT_SCHEMA, "description": f"rushhour scenario {info.scenario}"},
        "standardized": {
            "tool": "rushhour", "tool_version": version, "parallelism": max(1, info.processes),
            # rushhour's prompts are synthetic or from a dataset or trace; which one is the scenario's, not the
            # summary's: unknown rather than a guess
            "source": "unknown",
            # BR0.2's distribution kinds are fixed/gaussian/uniform/other: the measured lengths, as 'other'
            "input_seq_len": {"distribution": "other", "value": float(prompts.mean()), "min": int(prompts.min()),
                              "max": max(1, int(prompts.max()))},
        },
        "native": {"config": native},
    }


def _served_in_window(summary: Summary, table: pd.DataFrame) -> pd.DataFrame:
    """The served attempts of the tiers' own requests (no probe or control twin) within the measurement window: the
    requests the tiers' figures count."""
    missing = [c for c in _TABLE_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"the attempts table has no {', '.join(missing)}")
    frame = table.loc[~table["probe"].fillna(False).astype(bool)
                      & table["tier"].isin([t.name for t in summary.tiers]), list(_TABLE_COLUMNS)]
    # the audit's own rule (audit/phases.py): a logical request is judged by its first intended send's phase, and
    # run.json's phases carry the audit's verdict on each ("measured")
    phases = [{**p, "measure": p["measured"]} if isinstance(p.get("measured"), bool) else p
              for p in summary.run.phases]
    if phases and len(frame):
        first = frame.groupby("logical_id", observed=True)["intended_ns"].transform("min")
        first = first.fillna(frame["intended_ns"])  # an attempt without ids is its own logical request
        frame = frame[measured_mask(first.to_numpy(dtype=np.float64), phases)]
    return frame[frame["class"].astype(str) == "served"]


def _column(served: pd.DataFrame | None, name: str) -> np.ndarray | None:
    """A column's values over every served attempt, or None when any lacks it (a partial sum would undercount)."""
    if served is None or not len(served):
        return None
    values = served[name].to_numpy(dtype=np.float64)
    return values if np.isfinite(values).all() else None


def _sent(tier: TierSummary) -> int:
    return tier.drop_rate.n


def _aggregate(summary: Summary, served: pd.DataFrame | None) -> dict[str, Any]:
    sent = sum(_sent(t) for t in summary.tiers)
    requests = {
        "total": sent,
        "failures": sum(t.by_class.get(c, 0) for t in summary.tiers for c in FAILURE_CLASSES),
        "incomplete": sum(t.by_class.get(c, 0) for t in summary.tiers for c in INCOMPLETE_CLASSES),
    }
    latency: dict[str, Any] = {}
    lengths: dict[str, Any] = {"input_length": None, "output_length": None}
    if served is not None:
        ms = {name: served[f"{name}_ns"].to_numpy(dtype=np.float64) / NS_PER_MS for name in ("ttft", "tpot", "e2e")}
        out_tokens = served["output_tokens"].to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):  # no tokens: no per-token time (not finite: left out)
            ntpot = np.where(out_tokens > 0, ms["e2e"] / out_tokens, np.nan)
        latency = {"time_to_first_token": statistics(ms["ttft"], "ms"),
                   "normalized_time_per_output_token": statistics(ntpot, "ms/token"),
                   "time_per_output_token": statistics(ms["tpot"], "ms/token"),
                   "request_latency": statistics(ms["e2e"], "ms")}
        lengths = {"input_length": statistics(served["prompt_tokens"].to_numpy(dtype=np.float64), "count"),
                   "output_length": statistics(out_tokens, "count")}
    return {"requests": {**requests, **lengths}, "latency": latency,
            "throughput": _throughput(summary, served)}


def _throughput(summary: Summary, served: pd.DataFrame | None) -> dict[str, Any]:
    """Served requests and tokens per second of the measured window (rates are means: BR0.2 wants ``mean``)."""
    seconds = summary.measurement.measured_s or summary.run.duration_s
    if not seconds or seconds <= 0:
        return {}
    out: dict[str, Any] = {}
    if served is not None:  # the tiers' served counts are the same requests; the table is read for tokens
        out["request_rate"] = {"units": "queries/s", "mean": len(served) / seconds}
    else:
        out["request_rate"] = {"units": "queries/s", "mean": sum(t.by_class.get("served", 0) for t in summary.tiers)
                               / seconds}
    prompts, outputs = _column(served, "prompt_tokens"), _column(served, "output_tokens")
    if prompts is not None:
        out["input_token_rate"] = {"units": "tokens/s", "mean": float(prompts.sum()) / seconds}
    if outputs is not None:
        out["output_token_rate"] = {"units": "tokens/s", "mean": float(outputs.sum()) / seconds}
    if prompts is not None and outputs is not None:
        out["total_token_rate"] = {"units": "tokens/s", "mean": float(prompts.sum() + outputs.sum()) / seconds}
    return out


def _percentiles(p: Percentiles) -> dict[str, Any] | None:
    """A tier figure as the summary has it (ms; its bootstrap intervals; censored waits and lower bounds said)."""
    if p.n == 0:
        return None
    return {"n": p.n, "mean": p.mean, "p50": p.p50, "p90": p.p90, "p95": p.p95, "p99": p.p99, "max": p.max,
            "ci95": {k: list(v) for k, v in p.ci.items()} or None, "censored": p.censored or None,
            "lower_bound": p.lower_bound or None}


def _tier(summary: Summary, tier: TierSummary) -> dict[str, Any]:
    rate = tier.drop_rate
    latency = tier.latency
    waits = next((w for w in summary.waits if w.tier == tier.name and w.phase is None), None)
    return {
        "name": tier.name, "priority": tier.priority, "requests": tier.requests, "sent": _sent(tier),
        "served": tier.by_class.get("served", 0), "not_served": tier.unserved,
        "not_served_rate": {"value": rate.value, "low95": rate.low, "high95": rate.high},
        "policy_not_served_rate": tier.policy_drop_rate.value,
        "not_served_by_class": {c: n for c, n in tier.by_class.items() if n and c in UNSERVED_CLASSES},
        "not_sent": tier.by_class.get("not_sent", 0),
        # a tier that sent nothing has no retry ratio or goodput: absent, not the 0 the summary holds
        "attempts": tier.attempts, "retry_amplification": tier.retry_amplification if tier.requests else None,
        "goodput_per_s": tier.goodput_per_s if _sent(tier) else None,
        "latency_ms": {"ttft": _percentiles(latency.ttft_ms),
                       "ttft_from_intended_send": _percentiles(latency.ttft_from_intended_ms),
                       "tpot": _percentiles(latency.tpot_ms), "e2e": _percentiles(latency.e2e_ms)},
        "waits": None if waits is None else [
            {"part": p.part, "reported": p.reported, "not_reported": p.not_reported, "sum_ms": p.sum_ms,
             "share": p.share} for p in waits.parts],
        "slo": [{"check": v.check, "threshold": v.threshold, "observed": v.observed, "bound": v.bound,
                 "judge": v.judge, "passed": v.passed, "inconclusive": v.inconclusive, "message": v.message}
                for v in summary.verdicts if v.tier == tier.name],
    }


def _observability(summary: Summary) -> dict[str, Any]:
    sent = sum(_sent(t) for t in summary.tiers)
    unserved = sum(t.unserved for t in summary.tiers)
    extension = {
        "schema": EXTENSION_SCHEMA, "summary_schema": summary.schema_,
        "scenario": summary.run.scenario, "stack_profile": summary.run.profile, "model": summary.run.model,
        "valid": summary.validity.valid, "validity_reasons": summary.validity.reasons,
        "passed": summary.passed, "gate_exit_code": summary.exit_code,
        "interrupted": summary.run.interrupted, "stop_reason": summary.run.stop_reason or None,
        "measured_phases": summary.measurement.measured_phases,
        "excluded_phases": summary.measurement.excluded_phases,
        # what the run-wide figures above cover
        "run_wide_latency": "served requests of every tier in the measured phases (probes and control twins "
                            "left out); each tier's TTFT below also counts waits the run cut, as censored",
        "tiers": [_tier(summary, t) for t in summary.tiers],
    }
    # BR0.2's drop_rate is a portion: rushhour's not served / sent, the headline of its tiers
    drop = {"units": "fraction", "mean": unserved / sent} if sent else None
    return {"drop_rate": drop, EXTENSION: extension}
