"""Was the generator fit to judge latency? A saturated generator makes every tail claim suspect."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rushhour.audit import harm, remedy, text
from rushhour.audit.fold import NS_PER_MS, NS_PER_S, eq
from rushhour.audit.summary import Validity
from rushhour.records.manifest import STOP_DOOMED, RunManifest
from rushhour.records.record import REASON_TEMPLATE

# One transient (a GC pause, a page-in, a neighbour's burst on a shared machine) must not void a run:
# the generator is judged on *sustained* trouble, and on how many requests it actually delayed.
LOOP_LAG_MS = 50.0  # a health second whose worst 100 ms timer fired later than this is a lagging second
SUSTAINED_S = 3.0  # lagging (or CPU-busy) seconds in a row, at least this long, make the run invalid …
LAGGING_SHARE = 0.10  # … as do lagging seconds in more than this share of the busy seconds,
LAGGING_MIN = 3  # once there are at least this many of them (a 15 s step may have one bad second)
CPU_BUSY_PERCENT = 90.0  # of one core (psutil's per-process percent)
CPU_BUSY_SHARE = 0.10  # of health samples (with at least LAGGING_MIN of them, or SUSTAINED_S in a row)
SCHEDULE_LAG_MS = 100.0  # a first attempt sent later than this after its intended time was delayed
DELAYED_SHARE = 0.01  # more than this share of first attempts delayed makes the run invalid …
DELAYED_MIN = 3  # … once at least this many were (one start-up hiccup delays one or two, not three)
SAMPLE_S = 1.0  # loadgen/engine/health.py: one health sample per process and second
BUDGET_REASON = "budget"  # loadgen/engine/attempts.py: refused by the cost guard, recorded not_sent
UNREACHABLE_MIN_S = 5.0  # a dark span at least this long …
UNREACHABLE_SHARE = 0.10  # … or this share of the run, whichever is longer, makes the run invalid
NO_ANSWER_SHARE = 0.5  # more than this share of attempts without any HTTP answer makes the run invalid


def dark_spans(sent_ns: np.ndarray, end_ns: np.ndarray, dark: np.ndarray, answers_ns: np.ndarray,
               min_ns: float = 0.0) -> list[tuple[float, float, int]]:
    """Spans (start ns, end ns, attempts) in which consecutive attempts (by send time) got no HTTP answer.

    A span runs from the first dark attempt's send to the last one's end, and is cut at every
    moment the target did answer something (``answers_ns``: response headers, first tokens), so a
    slow but living target never shows a dark span. ``min_ns`` > 0 returns only spans at least about
    that long (a prefilter: the caller applies its exact limit), found without visiting every answer
    inside every span. Pure; the caller decides what length matters.
    """
    if not dark.any():
        return []
    order = np.argsort(sent_ns, kind="stable")
    sent, end, flag = sent_ns[order], end_ns[order], dark[order]
    del order
    ok = np.isfinite(answers_ns)
    finite = answers_ns if ok.all() else answers_ns[ok]
    del ok
    # already sorted (the audit's own caller sorts them): no second copy
    answers = finite if len(finite) < 2 or bool((finite[1:] >= finite[:-1]).all()) else np.sort(finite)
    del finite
    edges = np.diff(np.concatenate(([0], flag.astype(np.int8), [0])))
    first, after = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if min_ns <= 0:
        return [_cut_span(sent, end, answers, int(a), int(b)) for a, b in zip(first, after, strict=True)]
    # The longest piece of a span is its first piece, its last, or a gap between two answers inside it;
    # only answer gaps of about min_ns or more can make a long span, and a healthy target has few of them.
    starts = sent[first]
    stops = np.fmax.reduceat(np.where(flag, np.maximum(end, sent), np.nan), first)
    keep = np.isfinite(starts) & np.isfinite(stops)  # a span without a start or an end has no length
    threshold = min_ns * (1 - 1e-9)
    lo = np.searchsorted(answers, starts, "right")
    hi = np.searchsorted(answers, stops, "left")
    inside = hi > lo
    edge = np.where(inside, np.maximum(answers[np.minimum(lo, len(answers) - 1)] - starts,
                                       stops - answers[np.maximum(hi - 1, 0)]) if len(answers) else 0.0,
                    stops - starts)
    big = np.flatnonzero(np.diff(answers) >= threshold)  # gap i: answers[i] → answers[i + 1]
    has_big = inside & (np.searchsorted(big, hi - 1, "left") > np.searchsorted(big, lo, "left"))
    candidates = np.flatnonzero(keep & ((edge >= threshold) | has_big))
    return [_cut_span(sent, end, answers, int(first[j]), int(after[j])) for j in candidates]


def _cut_span(sent: np.ndarray, end: np.ndarray, answers: np.ndarray, a: int, b: int) -> tuple[float, float, int]:
    """One run of dark attempts ``[a, b)`` (in send order), cut at the target's answers: its longest piece."""
    ends = np.maximum(end[a:b], sent[a:b])
    ends = ends[~np.isnan(ends)]
    # no attempt with both a send and an end time: the span has no known stop (nanmax would warn)
    start, stop = float(sent[a]), (float(ends.max()) if len(ends) else float("nan"))
    lo, hi = np.searchsorted(answers, start, "right"), np.searchsorted(answers, stop, "left")
    cuts = np.concatenate(([start], answers[lo:hi], [stop]))
    gaps = np.diff(cuts)
    i = int(np.argmax(gaps))
    s0, s1 = float(cuts[i]), float(cuts[i + 1])
    inside = int(((sent[a:b] >= s0) & (sent[a:b] <= s1)).sum())
    return s0, s1, inside


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
    answers = _answer_times(attempts, out & (status > 0))
    limit_s = max(UNREACHABLE_MIN_S, UNREACHABLE_SHARE * duration_s)
    spans = dark_spans(sent[judged], end[judged], dark[judged], answers, min_ns=limit_s * NS_PER_S)
    del answers
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


def _answer_times(attempts: pd.DataFrame, answered: np.ndarray) -> np.ndarray:
    """Every moment the target answered something (headers, first tokens, ends), finite and sorted.

    Filled into one array and sorted in place: at a million attempts the pieces and their concatenation,
    sorted into a copy, were ~70 MB of the audit's peak while the fold ran beside it.
    """
    columns = [c for c in ("headers_ns", "first_token_ns", "done_ns") if c in attempts.columns]
    rows = int(answered.sum())
    out = np.empty(rows * len(columns), dtype=np.float64)
    for i, name in enumerate(columns):
        np.compress(answered, attempts[name].to_numpy(dtype=np.float64), out=out[i * rows:(i + 1) * rows])
    out = out[np.isfinite(out)] if not np.isfinite(out).all() else out
    out.sort()
    return out


def _p99(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.quantile(values, 0.99)) if len(values) else None


def longest_run_s(ts_ns: np.ndarray, bad: np.ndarray, sample_s: float = SAMPLE_S) -> float:
    """The longest time (s) covered by bad samples in a row: samples (any process) at most 1.5 sample
    periods apart chain; a chain of k samples covers about k seconds. Pure."""
    times = np.sort(ts_ns[bad & np.isfinite(ts_ns)]) / NS_PER_S
    if not len(times):
        return 0.0
    breaks = np.flatnonzero(np.diff(times) > 1.5 * sample_s)
    starts = np.concatenate(([0], breaks + 1))
    stops = np.concatenate((breaks, [len(times) - 1]))
    return float((times[stops] - times[starts]).max() + sample_s)


def sustained(ts_ns: np.ndarray, bad: np.ndarray, share_limit: float) -> tuple[bool, float, int]:
    """(sustained?, longest run in s, bad samples): bad for SUSTAINED_S in a row, or in more than
    ``share_limit`` of the samples once there are at least LAGGING_MIN of them. Pure."""
    count = int(bad.sum())
    run_s = longest_run_s(ts_ns, bad) if count else 0.0
    share = count / len(bad) if len(bad) else 0.0
    return (run_s >= SUSTAINED_S or (count >= LAGGING_MIN and share > share_limit)), run_s, count


def delayed_requests(lags_ms: np.ndarray) -> tuple[bool, int]:
    """(too many?, how many) first attempts left more than SCHEDULE_LAG_MS after their intended time. Pure."""
    lags_ms = lags_ms[np.isfinite(lags_ms)]
    late = int((lags_ms > SCHEDULE_LAG_MS).sum())
    return late >= DELAYED_MIN and late > DELAYED_SHARE * len(lags_ms), late


def first_token_facts(attempts: pd.DataFrame) -> bool:
    """Do the records say how their first tokens were timed (``first_token_clock``)? Older writers did not."""
    return "first_token_clock" in attempts.columns and bool(attempts["first_token_clock"].notna().any())


def first_token_errors(attempts: pd.DataFrame, health: pd.DataFrame) -> np.ndarray:
    """The possible error (ns) of each first token that was sent and came: audit.harm on the records."""
    keep = ~attempts["not_sent"].to_numpy(dtype=bool) & attempts["first_token_ns"].notna().to_numpy()
    n = int(keep.sum())

    def col(name: str) -> np.ndarray:
        if name not in attempts.columns:
            return np.full(n, np.nan)
        return attempts[name].to_numpy(dtype=np.float64)[keep]

    first = col("first_token_ns")
    read = col("first_token_read_ns")
    at = np.where(np.isfinite(read), read, first)
    h_ts = health["ts_ns"].to_numpy(dtype=np.float64) if len(health) else np.zeros(0)
    h_lag = health["loop_lag_ns"].to_numpy(dtype=np.float64) if len(health) else np.zeros(0)
    clock = (attempts["first_token_clock"].astype(object).to_numpy()[keep] if "first_token_clock" in attempts.columns
             else np.full(n, None, dtype=object))
    return harm.first_token_error_ns(clock, col("first_token_batch"), col("tokens"), col("itl_mean_ns"), first,
                                     harm.loop_lag_at(at, h_ts, h_lag))


def check_validity(
    attempts: pd.DataFrame, health: pd.DataFrame, *, skipped_lines: int, truncated_shards: int,
    workers_lost: int = 0, duration_s: float = 0.0, lost_names: list[str] | None = None,
    embedded_testbed: bool = False,
) -> Validity:
    """Mark the run invalid when the measurement was harmed: requests sent too late after their intended time,
    first tokens stamped too late (loop lag in effect on a user-space stamp, or a kernel stamp that a late read
    moved), not sent, a lost worker, or the target unreachable for a substantial part of the run (or for most
    attempts). Sustained loop lag or CPU that moved no time is a warning; for records that do not say how their
    first tokens were timed (older writers) it still voids the run, as it always did."""
    reasons: list[str] = []
    warnings: list[str] = []
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
    lag_ms = busy["loop_lag_ns"].to_numpy(dtype=np.float64) / NS_PER_MS if len(busy) else np.array([])
    lag = _p99(lag_ms) if len(lag_ms) else None
    busy_ts = busy["ts_ns"].to_numpy(dtype=np.float64) if len(busy) else np.array([])
    lagging, lag_run_s, lag_count = sustained(busy_ts, np.nan_to_num(lag_ms) > LOOP_LAG_MS, LAGGING_SHARE)
    cpu = health["cpu_percent"].to_numpy(dtype=np.float64) if len(health) else np.array([])
    cpu_ts = health["ts_ns"].to_numpy(dtype=np.float64) if len(health) else np.array([])
    cpu_ts = cpu_ts[np.isfinite(cpu)]
    cpu = cpu[np.isfinite(cpu)]
    cpu_max = float(cpu.max()) if len(cpu) else None
    cpu_busy, cpu_run_s, cpu_count = sustained(cpu_ts, cpu > CPU_BUSY_PERCENT, CPU_BUSY_SHARE)
    not_sent_records = template_refused = 0
    if len(attempts):
        # a budget refusal is the user's cost guard working, not the generator falling behind
        budget = eq(attempts["reason"], BUDGET_REASON)
        # a chat template over its caps is the input's fault, not the generator's: said as such below
        template = eq(attempts["reason"], REASON_TEMPLATE) & attempts["not_sent"].to_numpy()
        template_refused = int(template.sum())
        not_sent_records = int((attempts["not_sent"].to_numpy() & ~budget & ~template).sum())
    not_sent_health = 0
    if len(health) and "not_sent_total" in health.columns and not_sent_records:
        # each process reports its own running total; the largest per process is its final count
        not_sent_health = int(np.nan_to_num(health["not_sent_total"].to_numpy(dtype=np.float64)).max())
    not_sent = max(not_sent_records, not_sent_health)
    # First attempts only: a retry's wait is the retry policy's backoff, not the generator's lag.
    first = attempts["attempt"].fillna(1).to_numpy() <= 1 if len(attempts) else np.zeros(0, dtype=bool)
    sent = ~attempts["not_sent"].to_numpy() & first if len(attempts) else first
    lags = attempts["schedule_lag_ns"].to_numpy(dtype=np.float64)[sent] / NS_PER_MS if len(attempts) else np.array([])
    sched = _p99(lags) if len(lags) else None
    too_late, late = delayed_requests(lags)
    # harm, not symptom: with the timing facts in the records, loop lag and CPU only warn
    judged = len(attempts) > 0 and first_token_facts(attempts)
    symptoms = warnings if judged else reasons
    moved = judged_tokens = 0
    too_many_moved = False
    if judged:
        errors = first_token_errors(attempts, health)
        too_many_moved, moved, judged_tokens = harm.moved_first_tokens(errors)
        if too_many_moved:
            reasons.append(f"{moved} of {judged_tokens} first token(s) stamped more than "
                           f"{text.ms(harm.FIRST_TOKEN_TOLERANCE_MS)} late (read after a generator stall: a "
                           f"user-space stamp, or a kernel stamp of a read that held later tokens; limit "
                           f"{text.pct(harm.MOVED_SHARE)} of them): TTFT not trustworthy")
    # said of a symptom when neither harm rule fired (else the reasons name what it moved)
    harmless = "" if too_late or too_many_moved else ": it moved no send or first-token time beyond the tolerances"
    if lagging:
        symptoms.append(f"generator loop lag > {text.ms(LOOP_LAG_MS)} in {lag_count} of {len(lag_ms)} busy "
                       f"second(s), {text.seconds(lag_run_s)} in a row at most (limit {text.seconds(SUSTAINED_S)} "
                       f"in a row or {text.pct(LAGGING_SHARE)} of them)"
                       + (harmless if judged else ": tail latency not trustworthy"))
    if cpu_busy:
        symptoms.append(f"generator CPU > {text.pct(CPU_BUSY_PERCENT / 100)} of a core in {cpu_count} of {len(cpu)} "
                       f"samples, {text.seconds(cpu_run_s)} in a row at most (limit {text.seconds(SUSTAINED_S)} "
                       f"in a row or {text.pct(CPU_BUSY_SHARE)} of them)" + (harmless if judged else ""))
    if not_sent:
        reasons.append(f"{not_sent} request(s) not sent on schedule (generator out of slots)")
    if template_refused:
        reasons.append(f"{template_refused} request(s) not sent: the scenario's chat template could not render them "
                       "within its caps (run.json names the template)")
    if too_late:
        reasons.append(f"{late} of {int(np.isfinite(lags).sum())} request(s) left more than "
                       f"{text.ms(SCHEDULE_LAG_MS)} after their intended time (schedule lag p99 "
                       f"{text.ms(sched or 0.0)}; limit {text.pct(DELAYED_SHARE)} of them): the generator fell behind")
    if len(attempts) == 0:
        reasons.append("no request records")
    generator = lagging or cpu_busy or too_late or bool(not_sent) or too_many_moved
    diagnosis = remedy.diagnose(health, embedded_testbed=embedded_testbed) if generator else None
    return Validity(
        valid=not reasons,
        reasons=reasons,
        warnings=warnings,
        cause=diagnosis.sentence() if diagnosis is not None else None,
        remedies=diagnosis.remedies if diagnosis is not None else [],
        lagging_process=diagnosis.process or None if diagnosis is not None else None,
        load_avg_max=diagnosis.load_avg_max if diagnosis is not None else _load_max(health),
        generator_cpu_mean_percent=diagnosis.cpu_mean_percent if diagnosis is not None else None,
        embedded_testbed=embedded_testbed,
        timing_judged_by="harm" if judged else "symptom",
        first_tokens_moved=moved,
        loop_lag_p99_ms=lag,
        cpu_max_percent=cpu_max,
        not_sent=not_sent,
        schedule_lag_p99_ms=sched,
        loop_lag_sustained_s=lag_run_s,
        lagging_seconds=lag_count,
        delayed_requests=late,
        skipped_lines=skipped_lines,
        truncated_shards=truncated_shards,
        lost_workers=list(lost_names or []),
        thresholds={"loop_lag_ms": LOOP_LAG_MS, "sustained_s": SUSTAINED_S, "lagging_share": LAGGING_SHARE,
                    "lagging_min": LAGGING_MIN, "cpu_busy_percent": CPU_BUSY_PERCENT,
                    "cpu_busy_share": CPU_BUSY_SHARE, "schedule_lag_ms": SCHEDULE_LAG_MS,
                    "delayed_share": DELAYED_SHARE, "delayed_min": DELAYED_MIN,
                    "not_sent": 0, "unreachable_min_s": UNREACHABLE_MIN_S,
                    "unreachable_share": UNREACHABLE_SHARE, "no_answer_share": NO_ANSWER_SHARE,
                    "first_token_tolerance_ms": harm.FIRST_TOKEN_TOLERANCE_MS, "moved_share": harm.MOVED_SHARE,
                    "moved_min": harm.MOVED_MIN},
    )


def _load_max(health: pd.DataFrame) -> float | None:
    """The host's highest 1-minute load average in the health samples (None: not recorded)."""
    if not len(health) or "load1" not in health.columns:
        return None
    load = health["load1"].to_numpy(dtype=np.float64)
    return float(np.nanmax(load)) if np.isfinite(load).any() else None


SHORTFALL_EVENT = "shortfall"  # loadgen/engine/personas/common.py: arrivals the open loop could not offer, per interval


def with_shortfall(validity: Validity, events: list[dict[str, Any]], health: pd.DataFrame | None = None,
                   embedded_testbed: bool = False) -> Validity:
    """The run is invalid when the generator wrote ``shortfall`` events: it fell behind its schedule or
    ran out of slots past its per-interval record bound, so the load asked for was never offered. With the
    health samples, a cause and remedy are named if none was yet."""
    hits = [e for e in events if e.get("name") == SHORTFALL_EVENT]
    if not hits:
        return validity
    reason = (f"the generator could not offer the scheduled load in {len(hits)} interval(s) (shortfall events: "
              "arrivals too late to send or beyond its not_sent record bound were only counted)")
    update: dict[str, Any] = {"valid": False, "reasons": [*validity.reasons, reason]}
    if validity.cause is None and health is not None:
        after = health[~(health["ts_ns"].to_numpy(dtype=np.float64) < 0)] if len(health) else health
        diagnosis = remedy.diagnose(after, embedded_testbed=embedded_testbed)
        update |= {"cause": diagnosis.sentence(), "remedies": diagnosis.remedies,
                   "lagging_process": diagnosis.process or None,
                   "generator_cpu_mean_percent": diagnosis.cpu_mean_percent}
    return validity.model_copy(update=update)


def with_early_quits(validity: Validity, workers: dict[str, Any] | None, stop_reason: str | None = None,
                     error: str | None = None) -> Validity:
    """A multi-host run is invalid when a worker left before finishing its share (stopped, not dead: it
    closed its shard with a ``worker_stop``, so only run.json's ``workers`` account shows it); so is a run of
    local processes whose shares were cut under it (run.json ``worker_quit``, the runner names them)."""
    if not workers:
        if stop_reason != "worker_quit":
            return validity
        reason = f"{error or 'a load process stopped before its share ended'}: the rest of their load was never sent"
        return validity.model_copy(update={"valid": False, "reasons": [*validity.reasons, reason]})
    gone = sorted(set(workers.get("joined") or []) - set(workers.get("finished") or [])
                  - set(workers.get("missing") or []) - set(workers.get("late") or []))  # late ones had no share
    if not gone:
        return validity
    reason = (f"{len(gone)} worker(s) quit before finishing their share ({', '.join(gone)}): "
              "the rest of their load was never sent")
    return validity.model_copy(update={"valid": False, "reasons": [*validity.reasons, reason]})


def with_doomed(validity: Validity, manifest: RunManifest) -> Validity:
    """A run the fail-fast watch stopped (every attempt failed alike: wrong model, key or address) is
    invalid: it measured that one mistake, not the stack."""
    if manifest.stop_reason != STOP_DOOMED:
        return validity
    message = str((manifest.abort or {}).get("message") or "every attempt failed alike")
    reason = f"stopped early, nothing could be measured: {message}"
    return validity.model_copy(update={"valid": False, "reasons": [*validity.reasons, reason]})
