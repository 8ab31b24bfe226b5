"""Was the generator fit to judge latency? A saturated generator makes every tail claim suspect."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from audit import text
from audit.fold import NS_PER_MS, NS_PER_S, eq
from audit.summary import Validity

LOOP_LAG_P99_MS = 50.0
CPU_BUSY_PERCENT = 90.0  # of one core (psutil's per-process percent)
CPU_BUSY_SHARE = 0.10  # of health samples
SCHEDULE_LAG_P99_MS = 100.0
BUDGET_REASON = "budget"  # loadgen/engine/attempts.py: refused by the cost guard, recorded not_sent
UNREACHABLE_MIN_S = 5.0  # a dark span at least this long …
UNREACHABLE_SHARE = 0.10  # … or this share of the run, whichever is longer, makes the run invalid
NO_ANSWER_SHARE = 0.5  # more than this share of attempts without any HTTP answer makes the run invalid


def dark_spans(sent_ns: np.ndarray, end_ns: np.ndarray, dark: np.ndarray, answers_ns: np.ndarray
               ) -> list[tuple[float, float, int]]:
    """Spans (start ns, end ns, attempts) in which consecutive attempts (by send time) got no HTTP answer.

    A span runs from the first dark attempt's send to the last one's end, and is cut at every
    moment the target did answer something (``answers_ns``: response headers, first tokens), so a
    slow but living target never shows a dark span. Pure; the caller decides what length matters.
    """
    order = np.argsort(sent_ns, kind="stable")
    sent, end, flag = sent_ns[order], end_ns[order], dark[order]
    answers = np.sort(answers_ns[np.isfinite(answers_ns)])
    spans: list[tuple[float, float, int]] = []
    if not flag.any():
        return spans
    edges = np.diff(np.concatenate(([0], flag.astype(np.int8), [0])))
    for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        start, stop = float(sent[a]), float(np.nanmax(np.maximum(end[a:b], sent[a:b])))
        lo, hi = np.searchsorted(answers, start, "right"), np.searchsorted(answers, stop, "left")
        cuts = np.concatenate(([start], answers[lo:hi], [stop]))
        gaps = np.diff(cuts)
        i = int(np.argmax(gaps))
        s0, s1 = float(cuts[i]), float(cuts[i + 1])
        inside = int(((sent[a:b] >= s0) & (sent[a:b] <= s1)).sum())
        spans.append((s0, s1, inside))
    return spans


def _reachability(attempts: pd.DataFrame, out: np.ndarray, duration_s: float) -> list[str]:
    """Reasons the target could not be measured: unreachable for a long span, or most attempts unanswered."""
    status = attempts["status"].fillna(0).to_numpy()
    # an attempt the run cut (unfinished) says nothing about reachability: it was simply not over
    unfinished = eq(attempts["cls"], "unfinished") if "cls" in attempts.columns else np.zeros(len(attempts), bool)
    judged = out & ~unfinished
    dark = judged & (status <= 0)
    n, k = int(judged.sum()), int(dark.sum())
    reasons: list[str] = []
    if out.any() and not (status[out] > 0).any():
        return [f"no attempt got an HTTP response from the target ({int(out.sum())} connection errors, "
                "timeouts or cut attempts): is it reachable?"]
    if not n or not k:
        return reasons
    sent = attempts["sent_ns"].to_numpy(dtype=np.float64)
    end = attempts["t_end_ns"].to_numpy(dtype=np.float64) if "t_end_ns" in attempts.columns else sent
    answers = np.concatenate([attempts[c].to_numpy(dtype=np.float64)[out & (status > 0)]
                              for c in ("headers_ns", "first_token_ns", "done_ns") if c in attempts.columns])
    limit_s = max(UNREACHABLE_MIN_S, UNREACHABLE_SHARE * duration_s)
    spans = dark_spans(sent[judged], end[judged], dark[judged], answers)
    long = [(a, b, m) for a, b, m in spans if (b - a) / NS_PER_S >= limit_s]
    if long:
        a, b, _ = max(long, key=lambda span: span[1] - span[0])
        length = (b - a) / NS_PER_S
        more = f" ({len(long) - 1} more such span(s))" if len(long) > 1 else ""
        span = f"from {text.seconds(a / NS_PER_S)} to {text.seconds(b / NS_PER_S)}"
        reasons.append(f"target unreachable {span} ({text.seconds(length)}, limit {text.seconds(limit_s)}){more}: "
                       f"{k} of {n} attempts got no HTTP answer")
    elif k / n > NO_ANSWER_SHARE:
        reasons.append(f"{k} of {n} attempts ({text.pct(k / n)}) got no HTTP answer from the target "
                       f"(limit {text.pct(NO_ANSWER_SHARE)}): the run measured the network, not the stack")
    return reasons


def _p99(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.quantile(values, 0.99)) if len(values) else None


def check_validity(
    attempts: pd.DataFrame, health: pd.DataFrame, *, skipped_lines: int, truncated_shards: int,
    workers_lost: int = 0, duration_s: float = 0.0, lost_names: list[str] | None = None,
) -> Validity:
    """Mark the run invalid when the generator lagged, was busy, could not send, lost a worker,
    or the target was unreachable for a substantial part of the run (or for most attempts)."""
    reasons: list[str] = []
    if workers_lost:
        named = f" ({', '.join(lost_names)})" if lost_names else ""
        reasons.append(f"{workers_lost} load-generator process(es) died mid-run (no worker_stop){named}: "
                       "the rest of their share of the load was never sent")
    if len(attempts):
        # attempts that really went out: not refused by the generator itself (not_sent, breaker)
        out = ~attempts["not_sent"].to_numpy() & ~eq(attempts["reason"], "breaker_open")
        reasons += _reachability(attempts, out, duration_s)
    if len(health):
        # before the anchor no request is scheduled: start-up lag there judges nothing
        health = health[~(health["ts_ns"].to_numpy(dtype=np.float64) < 0)]
    # Loop lag distorts timings only while a request is in flight: a lagging second with nothing in
    # flight (a worker still starting up, an idle gap) cannot make any recorded time wrong.
    busy = health
    if len(health) and "in_flight" in health.columns:
        busy = health[np.nan_to_num(health["in_flight"].to_numpy(dtype=np.float64)) > 0]
    lag = _p99(busy["loop_lag_ns"].to_numpy(dtype=np.float64) / NS_PER_MS) if len(busy) else None
    cpu = health["cpu_percent"].to_numpy(dtype=np.float64) if len(health) else np.array([])
    cpu = cpu[np.isfinite(cpu)]
    cpu_max = float(cpu.max()) if len(cpu) else None
    busy_share = float((cpu > CPU_BUSY_PERCENT).mean()) if len(cpu) else 0.0
    not_sent_records = 0
    if len(attempts):
        # a budget refusal is the user's cost guard working, not the generator falling behind
        budget = eq(attempts["reason"], BUDGET_REASON)
        not_sent_records = int((attempts["not_sent"].to_numpy() & ~budget).sum())
    not_sent_health = 0
    if len(health) and "not_sent_total" in health.columns and not_sent_records:
        # each process reports its own running total; the largest per process is its final count
        not_sent_health = int(np.nan_to_num(health["not_sent_total"].to_numpy(dtype=np.float64)).max())
    not_sent = max(not_sent_records, not_sent_health)
    # First attempts only: a retry's wait is the retry policy's backoff, not the generator's lag.
    first = attempts["attempt"].fillna(1).to_numpy() <= 1 if len(attempts) else np.zeros(0, dtype=bool)
    sent = ~attempts["not_sent"].to_numpy() & first if len(attempts) else first
    lags = attempts["schedule_lag_ns"].to_numpy(dtype=np.float64)[sent] if len(attempts) else np.array([])
    sched = _p99(lags / NS_PER_MS) if len(lags) else None
    if lag is not None and lag > LOOP_LAG_P99_MS:
        reasons.append(f"generator loop lag p99 {text.ms(lag)} > {text.ms(LOOP_LAG_P99_MS)}")
    if busy_share > CPU_BUSY_SHARE:
        reasons.append(f"generator CPU > {text.pct(CPU_BUSY_PERCENT / 100)} of a core in {text.pct(busy_share)} "
                       f"of samples (limit {text.pct(CPU_BUSY_SHARE)})")
    if not_sent:
        reasons.append(f"{not_sent} request(s) not sent on schedule (generator out of slots)")
    if sched is not None and sched > SCHEDULE_LAG_P99_MS:
        reasons.append(f"schedule lag p99 {text.ms(sched)} > {text.ms(SCHEDULE_LAG_P99_MS)}")
    if len(attempts) == 0:
        reasons.append("no request records")
    return Validity(
        valid=not reasons,
        reasons=reasons,
        loop_lag_p99_ms=lag,
        cpu_max_percent=cpu_max,
        not_sent=not_sent,
        schedule_lag_p99_ms=sched,
        skipped_lines=skipped_lines,
        truncated_shards=truncated_shards,
        lost_workers=list(lost_names or []),
        thresholds={"loop_lag_p99_ms": LOOP_LAG_P99_MS, "cpu_busy_percent": CPU_BUSY_PERCENT,
                    "cpu_busy_share": CPU_BUSY_SHARE, "schedule_lag_p99_ms": SCHEDULE_LAG_P99_MS,
                    "not_sent": 0, "unreachable_min_s": UNREACHABLE_MIN_S,
                    "unreachable_share": UNREACHABLE_SHARE, "no_answer_share": NO_ANSWER_SHARE},
    )


SHORTFALL_EVENT = "shortfall"  # loadgen/engine/personas/common.py: arrivals the open loop could not offer, per interval


def with_shortfall(validity: Validity, events: list[dict[str, Any]]) -> Validity:
    """The run is invalid when the generator wrote ``shortfall`` events: it fell behind its schedule or
    ran out of slots past its per-interval record bound, so the load asked for was never offered."""
    hits = [e for e in events if e.get("name") == SHORTFALL_EVENT]
    if not hits:
        return validity
    reason = (f"the generator could not offer the scheduled load in {len(hits)} interval(s) (shortfall events: "
              "arrivals too late to send or beyond its not_sent record bound were only counted)")
    return validity.model_copy(update={"valid": False, "reasons": [*validity.reasons, reason]})


def with_early_quits(validity: Validity, workers: dict[str, Any] | None) -> Validity:
    """A multi-host run is invalid when a worker left before finishing its share (stopped, not dead: it
    closed its shard with a ``worker_stop``, so only run.json's ``workers`` account shows it)."""
    if not workers:
        return validity
    gone = sorted(set(workers.get("joined") or []) - set(workers.get("finished") or [])
                  - set(workers.get("missing") or []))
    if not gone:
        return validity
    reason = (f"{len(gone)} worker(s) quit before finishing their share ({', '.join(gone)}): "
              "the rest of their load was never sent")
    return validity.model_copy(update={"valid": False, "reasons": [*validity.reasons, reason]})
