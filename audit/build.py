"""Compose the audit: load → classify → fold → per-tier figures → timeline → checks → ``Summary``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from rushhour import stacks
from rushhour.audit import calibration, control, fairness, itl, memory, phases, tasks, text, timeline
from rushhour.audit.abandon import abandoned_by_persona
from rushhour.audit.agents import agent_figures
from rushhour.audit.bypass import bypass_check
from rushhour.audit.classify import classify_frame, named_cause, normalise_profile
from rushhour.audit.crosscheck import crosscheck, twin_priorities
from rushhour.audit.errors import AuditError
from rushhour.audit.fairness_cap import fairness_cap_finding
from rushhour.audit.fold import CALIBRATION_PERSONA, NS_PER_MS, NS_PER_S, eq, fold_logical, judged, prepare_attempts
from rushhour.audit.gates import abort_verdicts, exit_code, judge_of, tier_verdicts
from rushhour.audit.judged import not_judged_verdict, starved_verdict
from rushhour.audit.load import RunData, load_run
from rushhour.audit.metrics import ServerMetrics, load_metrics, metric_saturation, server_series
from rushhour.audit.outages import outage_mask, scheduled_outages
from rushhour.audit.scenario import RunScenario, TierInfo, from_manifest, latency_bounds, load_slo_file, testbed_label
from rushhour.audit.spend import spend
from rushhour.audit.stats import cdf_points, group_quantiles, percentiles, wait_percentiles, wilson
from rushhour.audit.summary import (
    CLIENT_REASONS,
    OUTCOME_CLASSES,
    UNSERVED_CLASSES,
    Evidence,
    Excluded,
    Fairness,
    Finding,
    Inflation,
    Latency,
    Measurement,
    Outage,
    Percentiles,
    PersonaSummary,
    PhaseSlice,
    Rate,
    RouteSummary,
    RunInfo,
    SaturationSlice,
    Summary,
    TenantSummary,
    TierRoute,
    TierSummary,
    Timeline,
    Validity,
    Verdict,
    Window,
)
from rushhour.audit.table import TableWriter, build_table
from rushhour.audit.timing_check import check_timing
from rushhour.audit.tokens import token_fidelity
from rushhour.audit.validity import check_validity, with_doomed, with_early_quits, with_shortfall
from rushhour.audit.waits import phase_splits, wait_splits
from rushhour.records.manifest import RunManifest
from rushhour.scenarios.model import SLO

SUMMARY_FILE = "summary.json"
EVIDENCE_PER_TIER = 20
BREAKER_REFUSAL = "breaker_open"  # reason of an attempt the client's breaker refused: nothing was sent
STARVATION_FINDING_S = 10.0


@dataclass
class Context:
    """What every per-tier computation shares."""

    duration_s: float
    grid: timeline.Grid
    windows: list[tuple[float, float]]
    base: calibration.Baseline
    scenario: RunScenario
    breakers: pd.DataFrame | None = None  # breaker state changes (per route), for the tier route table
    measured_s: float | None = None  # seconds the measured phases cover (per-second rates), when some are excluded

    @property
    def rate_s(self) -> float:
        """Seconds that per-second figures divide by: the measured phases', else the run's."""
        return self.measured_s if self.measured_s else self.duration_s


def _class_counts(cls: pd.Series) -> dict[str, int]:
    counts = cls.value_counts()
    return {c: int(counts.get(c, 0)) for c in OUTCOME_CLASSES}


def _value_counts(series: pd.Series) -> dict[str, int]:
    """Counts of each value, keys as text (counted first, converted after: cheap on a million rows)."""
    counts = series.value_counts(dropna=True)
    out: dict[str, int] = {}
    for key, count in counts.items():
        if count:
            name = str(int(key)) if isinstance(key, float | np.floating | np.integer) else str(key)
            out[name] = out.get(name, 0) + int(count)
    return out


def _status_by_class(attempts: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Raw HTTP status of attempts within each class ("queue_full" -> {"429": 27}): what the wire said."""
    if not len(attempts):
        return {}
    pairs = attempts.groupby([attempts["cls"], attempts["status"].fillna(0)], observed=True).size()
    out: dict[str, dict[str, int]] = {}
    for key, count in pairs.items():
        cls, status = key  # type: ignore[misc]  # a two-level group key
        if count:
            out.setdefault(str(cls), {})[str(int(float(status)))] = int(count)  # type: ignore[has-type]
    return out


def _good_mask(logical: pd.DataFrame, slo: SLO) -> np.ndarray:
    """Served within the tier's per-request latency ceilings (scenario.latency_bounds)."""
    good = logical["served"].to_numpy().copy()
    columns = {"ttft_ms": "ttft_ns", "ttft_from_intended_ms": "ttft_intended_ns", "tpot_ms": "tpot_ns",
               "e2e_ms": "e2e_ns"}
    for metric, bound in latency_bounds(slo).items():
        values = logical[columns[metric]].to_numpy(dtype=np.float64) / NS_PER_MS
        good &= ~(values > bound)  # a missing value (one-token answer has no TPOT) does not fail
    return good


# Attempt columns no tier figure reads (the ids, raw text, the table's and the run-wide checks' own): left out of
# each tier's slice, which is a copy (a third of the run's rows per tier)
_NOT_PER_TIER = ("request_id", "logical_id", "twin_of", "seq", "headers_ns", "done_ns", "last_token_ns",
                 "prompt_bytes", "tokens", "retry_after_s", "error", "in_band_error", "service_tier", "complete",
                 "client_timeout", "transport_error", "reconnected", "control", "task_id", "profile", "itl_max_ns",
                 "prompt_size")
_DERIVED_ONLY = ("last_token_ns", "prompt_bytes")  # prepare_attempts' inputs nothing after it reads
_EVIDENCE_COLUMNS = ("request_id", "unserved", "t_end_ns", "cls", "status", "reason", "error", "retry_after_s")
_GOOD_COLUMNS = ["served", "ttft_ns", "ttft_intended_ns", "tpot_ns", "e2e_ns"]  # what _good_mask reads


def rows_of(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]``, as a slice (no copy) when the rows are contiguous, as a tier's are (``load.tier_order``)."""
    idx = np.flatnonzero(mask)
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return frame.iloc[idx[0]:idx[-1] + 1]
    return frame[mask]


def _ms(frame: pd.DataFrame, column: str, mask: np.ndarray) -> np.ndarray:
    """One column's values (ms) where ``mask``: pulls a numpy column, never copies the frame."""
    return frame[column].to_numpy(dtype=np.float64)[mask] / NS_PER_MS


def _ttft(logical: pd.DataFrame, mask: np.ndarray, from_intended: bool) -> Percentiles:
    """TTFT of ``mask``'s requests, with the waits the run cut as right-censored observations.

    Observed: served requests, and unfinished ones whose first token had come. Censored: unfinished
    requests without a first token: they waited at least (end − send), or (end − first intended send).
    """
    unfinished = eq(logical["cls"], "unfinished") & mask
    has_token = logical["first_token_ns"].notna().to_numpy()
    observed = (logical["served"].to_numpy() & mask) | (unfinished & has_token)
    start = "first_intended_ns" if from_intended else "sent_ns"
    column = "ttft_intended_ns" if from_intended else "ttft_ns"
    cut = unfinished & ~has_token
    waited = (logical["t_end_ns"].to_numpy(dtype=np.float64)[cut]
              - logical[start].to_numpy(dtype=np.float64)[cut]) / NS_PER_MS
    return wait_percentiles(_ms(logical, column, observed), waited)


def _latency(logical: pd.DataFrame, attempts: pd.DataFrame) -> Latency:
    served = logical["served"].to_numpy()
    everyone = np.ones(len(logical), dtype=bool)
    # schedule lag of first attempts: a retry's delay is its backoff, reported as retries instead
    sent = ~attempts["not_sent"].to_numpy() & (attempts["attempt"].fillna(1).to_numpy() <= 1)
    return Latency(
        ttft_ms=_ttft(logical, everyone, from_intended=False),
        ttft_from_intended_ms=_ttft(logical, everyone, from_intended=True),
        tpot_ms=percentiles(_ms(logical, "tpot_ns", served)),
        itl_max_ms=percentiles(_ms(logical, "itl_max_ns", served)),
        e2e_ms=percentiles(_ms(logical, "e2e_ns", served)),
        schedule_lag_ms=percentiles(_ms(attempts, "schedule_lag_ns", sent)),
    )


def _inflation(logical: pd.DataFrame, base: calibration.Baseline) -> Inflation:
    mask = logical["served"].to_numpy()
    if not mask.any() or len(base.bins) == 0:
        return Inflation(idle_ttft_ms=None, p50_x=None, p99_x=None, source=base.source)
    ratio = calibration.inflation_ratio(logical, base)[mask]
    idle = base.idle_for(logical["prompt_size"].to_numpy()[mask])
    ratio = ratio[np.isfinite(ratio)]
    idle = idle[np.isfinite(idle)]
    spread = percentiles(ratio) if len(ratio) else None  # bootstrap intervals (the vendor side by side shows them)
    return Inflation(
        idle_ttft_ms=float(np.median(idle)) / NS_PER_MS if len(idle) else None,
        p50_x=float(np.quantile(ratio, 0.5)) if len(ratio) else None,
        p99_x=float(np.quantile(ratio, 0.99)) if len(ratio) else None,
        source=base.source,
        ci={k: v for k, v in spread.ci.items() if k in ("p50", "p99")} if spread is not None else {},
    )


@dataclass
class GroupRow:
    """One tenant's or persona's figures inside a tier."""

    key: str
    requests: int
    served: int
    unserved: int
    judged: int
    good: int
    drop_rate: Rate
    goodput_per_s: float
    ttft_p99_ms: float | None


def _group_rows(logical: pd.DataFrame, good: np.ndarray, key: str, duration_s: float) -> list[GroupRow]:
    """Per tenant or persona: requests, served, not served and its rate, goodput/s, TTFT p99 (counts and one sort)."""
    if len(logical) == 0:
        return []
    column = logical[key]
    if isinstance(column.dtype, pd.CategoricalDtype):  # group on codes: no string copies
        codes = column.cat.codes.to_numpy()
        names = np.append(np.asarray(column.cat.categories.astype(str), dtype=object), "")
        keys = np.where(codes < 0, len(names) - 1, codes)
    else:
        keys, uniq = pd.factorize(column.fillna("").astype(str))
        names = np.asarray(uniq, dtype=object)
    keys = np.asarray(keys, dtype=np.int64)
    served = logical["served"].to_numpy()
    flags = {"served": served, "unserved": logical["unserved"].to_numpy(), "judged": judged(logical).to_numpy(),
             "good": good}
    width = int(keys.max()) + 1
    every = np.bincount(keys, minlength=width)
    present = np.flatnonzero(every)  # the groups, in key order (as a sorted groupby lists them)
    sizes = every[present]
    cols = {c: np.bincount(keys[np.asarray(f, dtype=bool)], minlength=width)[present] for c, f in flags.items()}
    ttft = np.where(served, logical["ttft_ns"].to_numpy(dtype=np.float64) / NS_PER_MS, np.nan)
    p99 = group_quantiles(keys, ttft, (0.99,), width)[0][present]
    rows = []
    for i, code in enumerate(present):
        unserved, n_judged, n_good = int(cols["unserved"][i]), int(cols["judged"][i]), int(cols["good"][i])
        rows.append(GroupRow(
            key=str(names[int(code)]), requests=int(sizes[i]), served=int(cols["served"][i]), unserved=unserved,
            judged=n_judged, good=n_good, drop_rate=wilson(unserved, n_judged),
            goodput_per_s=n_good / duration_s if duration_s > 0 else 0.0,
            ttft_p99_ms=None if np.isnan(p99[i]) else float(p99[i]),
        ))
    return rows


def _saturation_slice(logical: pd.DataFrame, ctx: Context) -> SaturationSlice | None:
    if not ctx.windows:
        return None
    inside = timeline.in_windows(logical["first_intended_ns"], ctx.windows)
    ok = judged(logical).to_numpy() & inside
    return SaturationSlice(
        requests=int(inside.sum()),
        by_class=_class_counts(logical["cls"][inside]),
        drop_rate=wilson(int((logical["unserved"].to_numpy() & ok).sum()), int(ok.sum())),
        ttft_ms=_ttft(logical, inside, from_intended=False),
        ttft_from_intended_ms=_ttft(logical, inside, from_intended=True),
    )


def _phase_slices(logical: pd.DataFrame, phase_list: list[dict[str, Any]]) -> list[PhaseSlice]:
    """The tier per phase (by first intended send): requests, not served, TTFT with censored waits."""
    if not phase_list:
        return []
    idx = phases.phase_of(logical["first_intended_ns"], phase_list)
    flags = phases.measured_flags(phase_list)
    ok = judged(logical).to_numpy()
    unserved = logical["unserved"].to_numpy() & ok
    out = []
    for i, (phase, measured) in enumerate(zip(phase_list, flags, strict=True)):
        inside = idx == i
        out.append(PhaseSlice(
            phase=str(phase.get("name", "")), measured=measured, requests=int(inside.sum()),
            unserved=int((unserved & inside).sum()),
            drop_rate=wilson(int((unserved & inside).sum()), int((ok & inside).sum())),
            ttft_ms=_ttft(logical, inside, from_intended=False),
        ))
    return out


def _phase_verdicts(info: TierInfo, attempts: pd.DataFrame, logical: pd.DataFrame, ctx: Context,
                    sat_good_total: int, judge: str | None) -> list[Verdict]:
    """The tier's per-phase SLOs (``slo.phases``), each judged like a tier on that phase's requests alone.

    Checks are named ``<phase>: <check>`` (e.g. ``peak: ttft_ms.p99``); the phase's judge is the tier's
    unless the phase sets its own.
    """
    out: list[Verdict] = []
    names = [str(p.get("name", "")) for p in ctx.scenario.phases]
    idx = phases.phase_of(logical["first_intended_ns"], ctx.scenario.phases)
    codes = logical["logical_code"].to_numpy()
    for phase, slo in info.slo.phases.items():
        if phase not in names:
            raise AuditError(f"tier {info.name!r}: slo.phases names unknown phase {phase!r} (phases: {names})")
        inside = idx == names.index(phase)
        att = attempts[np.isin(attempts["logical_code"].to_numpy(), codes[inside])]
        log = logical[inside].reset_index(drop=True)
        if "judge" not in slo.model_fields_set:
            slo = slo.model_copy(update={"judge": info.slo.judge})
        sub = TierInfo(info.name, info.priority, slo)
        tier = _tier_summary(sub, att, log, pd.DataFrame(columns=["tier"]), ctx, sat_good_total)
        for v in tier_verdicts(tier, slo, judge):
            rest = v.message[len(info.name) + 1:] if v.message.startswith(info.name + " ") else v.message
            out.append(v.model_copy(update={"check": f"{phase}: {v.check}",
                                            "message": f"{info.name} {phase}: {rest}"}))
    return out


def _tier_summary(
    info: TierInfo, attempts: pd.DataFrame, logical: pd.DataFrame, task_lines: pd.DataFrame, ctx: Context,
    sat_good_total: int,
) -> TierSummary:
    ok = judged(logical).to_numpy()
    n_judged = int(ok.sum())
    unserved = logical["unserved"].to_numpy() & ok
    good = _good_mask(logical, info.slo)
    # sent: neither refused by the generator (not_sent) nor by the client's breaker (nothing went out)
    sent = ~attempts["not_sent"].to_numpy() & ~eq(attempts["reason"], BREAKER_REFUSAL)
    status = attempts["status"].to_numpy(dtype=np.float64)
    served_mask = logical["served"].to_numpy()
    in_sat_attempt = timeline.in_windows(attempts["sent_ns"], ctx.windows)
    good_in_sat = int((good & timeline.in_windows(logical["first_intended_ns"], ctx.windows)).sum())
    floor, floor_rate = fairness.floor_share(good_in_sat, sat_good_total, info.slo.floor_share,
                                             saturated=bool(ctx.windows))
    floor.rate = floor_rate if sat_good_total else None
    tenants = _group_rows(logical, good, "tenant", ctx.rate_s)
    tenant_ratio = [r.good / r.judged for r in tenants if r.judged]
    personas = _group_rows(logical, good, "persona", ctx.rate_s)
    abandoned = abandoned_by_persona(logical)
    agent_lines, session_lines = tasks.split_kinds(task_lines, ctx.scenario.persona_kinds)
    reasons = _value_counts(attempts["reason"])
    return TierSummary(
        name=info.name,
        priority=info.priority,
        attempts=len(attempts),
        requests=len(logical),
        by_class=_class_counts(logical["cls"]),
        attempts_by_class=_class_counts(attempts["cls"]),
        by_status=_value_counts(attempts["status"].fillna(0)),
        by_reason={k: v for k, v in reasons.items() if k not in CLIENT_REASONS},
        client_reasons={k: v for k, v in reasons.items() if k in CLIENT_REASONS},
        status_by_class=_status_by_class(attempts),
        unserved=int(unserved.sum()),
        drop_rate=wilson(int(unserved.sum()), n_judged),
        policy_drop_rate=wilson(int((logical["policy_drop"].to_numpy() & ok).sum()), n_judged),
        drop_rate_by_class={c: wilson(int((eq(logical["cls"], c) & ok).sum()), n_judged) for c in UNSERVED_CLASSES},
        share_429=wilson(int((status[sent] == 429).sum()), int(sent.sum())),
        share_503=wilson(int((status[sent] == 503).sum()), int(sent.sum())),
        goodput=wilson(int(good[ok].sum()), n_judged),
        goodput_per_s=float(good.sum()) / ctx.rate_s if ctx.rate_s > 0 else 0.0,
        output_tokens_per_s=_tokens_per_s(attempts, ctx.rate_s),
        latency=_latency(logical, attempts),
        inflation=_inflation(logical, ctx.base),
        saturation=_saturation_slice(logical, ctx),
        retry_amplification=len(attempts) / len(logical) if len(logical) else 0.0,
        extra_attempts_in_saturation=int((in_sat_attempt & (attempts["attempt"].to_numpy(dtype=np.float64) > 1)).sum()),
        routes=_value_counts(logical["route"]) if "route" in logical.columns else {},
        fairness=Fairness(
            jain_index=fairness.tenant_jain(tenant_ratio),
            tenants=[TenantSummary(tenant=r.key, requests=r.requests, served=r.served, unserved=r.unserved,
                                   drop_rate=r.drop_rate, goodput_per_s=r.goodput_per_s, ttft_p99_ms=r.ttft_p99_ms)
                     for r in tenants],
        ),
        starvation_max_gap_s=fairness.starvation_gap_s(attempts),
        floor=floor,
        tasks=tasks.task_stats(agent_lines, logical),
        sessions=tasks.task_stats(session_lines, logical),
        preempted_after_first_token=int((eq(attempts["cls"], "preempted")
                                         & attempts["first_token_ns"].notna().to_numpy()).sum()),
        preempted_in_progress=int(eq(attempts["cls"], "preempted").sum()),
        personas=[PersonaSummary(persona=r.key, requests=r.requests, served=r.served, unserved=r.unserved,
                                 drop_rate=r.drop_rate, goodput_per_s=r.goodput_per_s, ttft_p99_ms=r.ttft_p99_ms,
                                 abandoned=abandoned.get(r.key, 0),
                                 abandon_rate=wilson(abandoned.get(r.key, 0), r.drop_rate.n),
                                 patience=ctx.scenario.persona_patience.get(r.key))
                  for r in personas],
        route_detail=(_tier_routes(attempts, logical, ctx.breakers if ctx.breakers is not None else pd.DataFrame(),
                                   ctx.duration_s * NS_PER_S)
                      if _has_fallback(attempts) else []),
        ttft_cdf_ms={
            "from_send": cdf_points(_ms(logical, "ttft_ns", served_mask)),
            "from_intended": cdf_points(_ms(logical, "ttft_intended_ns", served_mask)),
        },
        tokens=token_fidelity(attempts),
        agents=agent_figures(attempts),
    )


def _routes(attempts: pd.DataFrame, breakers: pd.DataFrame, end_ns: float) -> list[RouteSummary]:
    if len(attempts) == 0:
        return []
    out = []
    # Only logical requests with several attempts can have switched route: look at those alone.
    _, switched = _switched(attempts)
    # the few columns read per route; a run of one route (the usual case) reads them without a copy
    columns = attempts[["served", "ttft_ns", "cls", "not_sent", "sent_ns"]]
    for route, rows in _route_rows(attempts):
        part = columns if rows is None else columns[rows]
        served_rows = part["served"].to_numpy()
        ttft = part["ttft_ns"].to_numpy(dtype=np.float64)[served_rows] / NS_PER_MS
        ttft = ttft[np.isfinite(ttft)]
        moved = switched[switched["route"].astype(object) == route]
        out.append(RouteSummary(
            route=str(route), attempts=len(part), served=int(served_rows.sum()), by_class=_class_counts(part["cls"]),
            ttft_p50_ms=float(np.quantile(ttft, 0.5)) if len(ttft) else None,
            ttft_p99_ms=float(np.quantile(ttft, 0.99)) if len(ttft) else None,
            switch_reasons=_value_counts(moved["retry_reason"].astype(object).fillna("unknown")),
            breaker_open_s=_breaker_open_s(breakers, str(route), end_ns),
            breaker_half_open_s=_breaker_open_s(breakers, str(route), end_ns, state="half_open"),
            moved_because=_moved_because(moved, breakers),
            down_s=_down_s(part),
        ))
    return out


def _route_rows(attempts: pd.DataFrame) -> list[tuple[str, np.ndarray | None]]:
    """Each route name (no route: ``primary``) in sorted order, with its rows (None: every row is that route's)."""
    route = attempts["route"]
    if not isinstance(route.dtype, pd.CategoricalDtype):
        keys = route.astype(object).fillna("primary").to_numpy()
        return [(str(name), keys == name) for name in sorted(set(keys))]
    # by the category codes: one name per category in use, rows compared as small integers
    names = np.append(np.asarray(route.cat.categories.astype(object), dtype=object), "primary")
    codes = route.cat.codes.to_numpy().astype(np.int64)
    codes = np.where(codes < 0, len(names) - 1, codes)
    used = np.flatnonzero(np.bincount(codes, minlength=len(names)))
    out: list[tuple[str, np.ndarray | None]] = []
    for name in sorted({str(names[c]) for c in used}):
        mine = [c for c in used if str(names[c]) == name]
        out.append((name, None if len(mine) == len(used) else np.isin(codes, mine)))
    return out


def _switched(attempts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(attempts of multi-attempt logical requests in order, those that moved to another route)."""
    codes = attempts["logical_code"].to_numpy()
    multi = np.bincount(codes)[codes] > 1 if len(codes) else np.zeros(0, dtype=bool)
    ordered = attempts[multi].sort_values(["logical_code", "attempt"])
    prev_route = ordered.groupby("logical_code", sort=False)["route"].shift(1).astype(object)
    moved_route = prev_route.notna().to_numpy() & (prev_route.to_numpy() != ordered["route"].astype(object).to_numpy())
    switched = ordered[moved_route].assign(prev_route=prev_route[moved_route].to_numpy())
    return ordered, switched


# why traffic moved, coarse: the outcome key that starts ``retry_reason`` (loadgen/resilience.py)
_MOVE_CAUSE = {"transport": "connection", "incomplete": "stream_cut", "in_band": "in_band_error"}
_BREAKER_CAUSE = re.compile(r"(?:last|probe_failed):\s*([^\s,;]+)")


def _moved_because(moved: pd.DataFrame, breakers: pd.DataFrame) -> dict[str, int]:
    """Attempts that moved to a route, by cause; a breaker refusal names what opened that breaker."""
    if len(moved) == 0:
        return {}
    keys = moved["retry_reason"].astype(object).fillna("unknown").astype(str).str.split().str[0]
    causes = keys.map(lambda k: _MOVE_CAUSE.get(k, k)).to_numpy(dtype=object)
    is_breaker = causes == "breaker_open"
    if is_breaker.any() and len(breakers):
        opened = breakers[(breakers["state"].astype(object) == "open").to_numpy()].sort_values("ts_ns")
        sent = moved["sent_ns"].to_numpy(dtype=np.float64)
        prev = moved["prev_route"].astype(object).to_numpy()
        for i in np.flatnonzero(is_breaker):
            rows = opened[(opened["route"].astype(object) == prev[i]).to_numpy()]
            ts = rows["ts_ns"].to_numpy(dtype=np.float64)
            j = int(np.searchsorted(ts, sent[i], side="right")) - 1
            if j >= 0:
                found = _BREAKER_CAUSE.search(str(rows["cause"].astype(object).to_numpy()[j] or ""))
                if found:
                    key = found.group(1)
                    causes[i] = f"breaker_open ({_MOVE_CAUSE.get(key, key)})"
    return _value_counts(pd.Series(causes))


def _down_s(part: pd.DataFrame) -> float:
    """Seconds (1 s buckets by send time) in which a route got attempts and served none of them."""
    sent = ~part["not_sent"].to_numpy(dtype=bool) & ~eq(part["cls"], "cancelled")
    if not sent.any():
        return 0.0
    bucket = np.floor(part["sent_ns"].to_numpy(dtype=np.float64)[sent] / NS_PER_S)
    ok = bucket == bucket  # drop NaN send times
    bucket, served = bucket[ok].astype(np.int64), part["served"].to_numpy(dtype=bool)[sent][ok]
    if len(bucket) == 0:
        return 0.0
    frame = pd.DataFrame({"b": bucket, "served": served}).groupby("b")["served"].any()
    return float((~frame).sum())


def merged_breaker_changes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's breaker timeline from every process's lines (sorted by time): a change to the state
    the route is already in is another process following (a shared breaker), not a new change."""
    state: dict[str, str] = {}
    out = []
    for row in rows:
        if state.get(row["route"]) != row["state"]:
            state[row["route"]] = row["state"]
            out.append(row)
    return out


def _breaker_open_s(breakers: pd.DataFrame, route: str, end_ns: float, state: str = "open") -> float:
    """Seconds the route's breaker spent in ``state`` (until its next change, or the end of the run)."""
    if len(breakers) == 0:
        return 0.0
    part = breakers[breakers["route"].astype(object) == route].sort_values("ts_ns")
    ts = part["ts_ns"].to_numpy(dtype=np.float64)
    nxt = np.append(ts[1:], end_ns)
    is_open = (part["state"].astype(object) == state).to_numpy()
    return float(np.clip(nxt - ts, 0, None)[is_open].sum() / NS_PER_S)


def _tier_routes(attempts: pd.DataFrame, logical: pd.DataFrame, breakers: pd.DataFrame,
                 end_ns: float) -> list[TierRoute]:
    """The tier per route: requests ended and served there, share of the tier's served, why traffic
    moved there, TTFT and its cost against the tier's primary, breaker open time of the route."""
    if len(attempts) == 0 or "route" not in attempts.columns:
        return []
    _, switched = _switched(attempts)
    ended = logical["route"].astype(object).fillna("primary").to_numpy()
    served_l = logical["served"].to_numpy(dtype=bool)
    total_served = int(served_l.sum())
    att_route = attempts["route"].astype(object).fillna("primary").to_numpy()
    names = sorted(set(att_route) | set(ended), key=lambda n: (n != "primary", n))
    rows: list[TierRoute] = []
    primary: tuple[float | None, float | None] = (None, None)
    for name in names:
        part = attempts[att_route == name]
        ttft = part["ttft_ns"].to_numpy(dtype=np.float64)[part["served"].to_numpy(dtype=bool)] / NS_PER_MS
        ttft = ttft[np.isfinite(ttft)]
        p50 = float(np.quantile(ttft, 0.5)) if len(ttft) else None
        p99 = float(np.quantile(ttft, 0.99)) if len(ttft) else None
        if name == "primary":
            primary = (p50, p99)
        moved = switched[(switched["route"].astype(object) == name).to_numpy()]
        here = ended == name
        served = int((here & served_l).sum())
        rows.append(TierRoute(
            route=str(name), requests=int(here.sum()), served=served,
            served_share=served / total_served if total_served else None,
            attempts=len(part), moved_here=len(moved),
            moved_because=_moved_because(moved, breakers),
            ttft_p50_ms=p50, ttft_p99_ms=p99,
            ttft_p50_cost_ms=None if name == "primary" or p50 is None or primary[0] is None else p50 - primary[0],
            ttft_p99_cost_ms=None if name == "primary" or p99 is None or primary[1] is None else p99 - primary[1],
            breaker_open_s=_breaker_open_s(breakers, str(name), end_ns),
        ))
    return rows


def _none_if_na(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA else value


def _evidence(attempts: pd.DataFrame, tier: str) -> list[Evidence]:
    """The tier's first drops by end time (``attempts``: the tier's attempts, or only its unserved ones)."""
    drops = attempts[attempts["unserved"].to_numpy()].sort_values("t_end_ns").head(EVIDENCE_PER_TIER)
    out = []
    for row in drops.to_dict("records"):
        retry, reason, error = (_none_if_na(row.get(k)) for k in ("retry_after_s", "reason", "error"))
        status = _none_if_na(row.get("status"))
        out.append(Evidence(
            tier=tier, request_id=str(row["request_id"]), t_s=float(row["t_end_ns"]) / NS_PER_S,
            status=int(status) if status is not None else 0, outcome=str(row["cls"]),
            reason=None if reason is None else str(reason),
            retry_after_s=None if retry is None else float(retry),
            error=None if error is None else str(error),
        ))
    return out


def _windows(attempts: pd.DataFrame, ratio: np.ndarray, grid: timeline.Grid, metrics: ServerMetrics,
             outages: list[Outage] | None = None) -> tuple[list[tuple[float, float]], list[Window]]:
    out_mask = timeline.outcome_saturation_mask(attempts, ratio, grid)
    met_mask, signals = metric_saturation(metrics, grid)
    if outages:  # a stack switched off is down, not saturated: its scheduled outages are named apart
        down = outage_mask(outages, grid.bucket_s, len(out_mask))
        out_mask, met_mask = out_mask & ~down, met_mask & ~down[: len(met_mask)]
    spans = timeline.windows_from_mask(out_mask | met_mask, grid)
    windows = []
    for start, end in spans:
        a, b = round(start / grid.bucket_s), round(end / grid.bucket_s)
        o, m = bool(out_mask[a:b].any()), bool(met_mask[a:b].any())
        source = "both" if o and m else "metrics" if m else "outcomes"
        detail = []
        if o:
            detail.append("drops or TTFT > 3x idle")
        if m:
            detail.append("server: " + ", ".join(signals))
        windows.append(Window(start_s=start, end_s=end, source=source, detail="; ".join(detail)))  # type: ignore[arg-type]
    return spans, windows


def _tokens_per_s(attempts: pd.DataFrame, seconds: float) -> float | None:
    """Output tokens of the served attempts per second (None: none reported its tokens, or no window)."""
    if "output_tokens" not in attempts.columns or seconds <= 0:
        return None
    tokens = attempts.loc[eq(attempts["cls"], "served"), "output_tokens"].to_numpy(dtype=np.float64)
    tokens = tokens[np.isfinite(tokens)]
    return round(float(tokens.sum()) / seconds, 3) if len(tokens) else None


def _stop_reason(manifest: RunManifest, workers_lost: int) -> tuple[str, bool]:
    """(stop reason, interrupted): run.json's reason; a lost worker makes a 'completed' run ``lost_worker``."""
    reason = manifest.stop_reason or ""
    if workers_lost and reason in ("", "completed"):
        reason = "lost_worker"
    # limit_found, precision_reached: the find-limit search or --until ended it, as they were asked to
    return reason, reason not in ("", "completed", "limit_found", "precision_reached")


def _calibration(m: RunManifest) -> dict[str, Any] | None:
    """run.json's calibrated preset (a simulated run's), as plain data; None when there is none."""
    found = (m.simulation or {}).get("calibration") if isinstance(m.simulation, dict) else None
    return dict(found) if isinstance(found, dict) else None


def _run_info(data: RunData, sc: RunScenario, duration_s: float, workers_lost: int = 0) -> RunInfo:
    m = data.manifest
    stop_reason, interrupted = _stop_reason(m, workers_lost)
    started = m.started_at
    if not started and m.wall_anchor_ns is not None:
        started = dt.datetime.fromtimestamp(m.wall_anchor_ns / 1e9, tz=dt.UTC).isoformat()
    target = m.extra.get("target")  # run.json files before 0.1 held the target as {url, profile}
    target_url = target.get("url") if isinstance(target, dict) else target
    target_url = m.resolved_target_url or m.target_url or target_url
    command: Any = m.command_line or m.extra.get("command") or ""
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    return RunInfo(
        run_id=m.run_id or data.run_dir.name,
        scenario=sc.name or m.scenario_name,
        description=sc.description,
        target=str(target_url or sc.target),
        testbed=testbed_label(sc.model_obj),
        profile=m.profile or sc.profile,
        model=m.model or sc.model,
        seed=int(m.seed or sc.seed or 0),
        started_at=str(started or ""),
        duration_s=duration_s,
        processes=max(m.processes, data.processes),
        mode=m.mode or "real",
        calibration=_calibration(m),
        stop_reason=stop_reason,
        interrupted=interrupted,
        abort=m.abort if stop_reason.startswith("aborted") else None,
        drain_s=float(sc.model_obj.drain_s) if sc.model_obj is not None else None,
        find_limit=found if isinstance(found := m.extra.get("find_limit"), dict) else None,
        until=until if isinstance(until := m.extra.get("until"), dict) else None,
        versions={str(k): str(v) for k, v in m.versions.items()},
        command=str(command),
        phases=sc.phases,
    )


def _duration_s(data: RunData, attempts: pd.DataFrame, sc: RunScenario) -> float:
    observed = float(np.nanmax(attempts["t_end_ns"].to_numpy(dtype=np.float64))) / NS_PER_S if len(attempts) else 0.0
    if not np.isfinite(observed):
        observed = 0.0
    declared = data.manifest.duration_s
    if declared is not None and declared > 0:
        return max(float(declared), observed)
    return max(observed, sc.duration_s or 0.0, 1e-3)


def _tier_infos(sc: RunScenario, attempts: pd.DataFrame, slo_override: dict[str, SLO] | None) -> list[TierInfo]:
    infos = {t.name: TierInfo(t.name, t.priority, t.slo) for t in sc.tiers}
    for name in pd.unique(attempts["tier"].dropna()):
        infos.setdefault(str(name), TierInfo(str(name)))
    if slo_override:
        unknown = sorted(set(slo_override) - set(infos))
        if unknown:
            raise AuditError(f"SLO file names unknown tier(s) {unknown} (tiers: {sorted(infos)})")
        for name, slo in slo_override.items():
            infos[name].slo = slo
    return sorted(infos.values(), key=lambda t: (-t.priority, t.name))


def _has_fallback(attempts: pd.DataFrame) -> bool:
    if "route" not in attempts.columns:
        return False
    route = attempts["route"]
    if isinstance(route.dtype, pd.CategoricalDtype):  # the routes in use, by their codes: no text per row
        used = np.bincount(route.cat.codes.to_numpy() + 1, minlength=len(route.cat.categories) + 1)[1:] > 0
        return any(str(name) != "primary" for name in route.cat.categories[used])
    return bool((route.astype(object).fillna("primary") != "primary").any())


MASKED_DOWN_SHARE = 0.5  # the primary was down for at least this share of the run …
MASKED_DROP_RATE = 0.05  # … yet the tier's drop rate stayed at most this: the fallback hid the outage


def _masked_findings(tiers: list[TierSummary], routes: list[RouteSummary], duration_s: float) -> list[Finding]:
    """A warning per tier when the primary was down most of the run and fallbacks kept the tier looking fine."""
    primary = next((r for r in routes if r.route == "primary"), None)
    if primary is None or duration_s <= 0:
        return []
    down_s = max(primary.down_s, primary.breaker_open_s + primary.breaker_half_open_s)
    share = down_s / duration_s
    if share < MASKED_DOWN_SHARE:
        return []
    out = []
    for tier in tiers:
        fallback = [r for r in tier.route_detail if r.route != "primary"]
        fb_served = sum(r.served for r in fallback)
        served = sum(r.served for r in tier.route_detail)
        drop = tier.drop_rate.value or 0.0
        if not fb_served or drop > MASKED_DROP_RATE:
            continue
        out.append(Finding(
            kind="fallback_hid_outage", severity="warning", tier=tier.name,
            message=f"the primary route was down {text.seconds(down_s)} of {text.seconds(duration_s)} "
                    f"({text.pct(share)}); fallback route(s) served {fb_served} of {served} {tier.name} requests, "
                    f"so the tier's drop rate ({text.pct(drop)}) hides the outage",
            data={"primary_down_s": down_s, "duration_s": duration_s, "down_share": share,
                  "fallback_served": fb_served, "served": served,
                  "breaker_open_s": primary.breaker_open_s, "routes": {r.route: r.served for r in tier.route_detail}}))
    return out


def _findings(tiers: list[TierSummary]) -> list[Finding]:
    out = []
    for tier in tiers:
        if tier.preempted_after_first_token:
            out.append(Finding(kind="preempted_in_progress", severity="warning", tier=tier.name,
                               message=f"{tier.preempted_after_first_token} {tier.name} stream(s) were killed after "
                                       "their first token (the user saw a partial answer)",
                               data={"count": tier.preempted_after_first_token,
                                     "in_progress": tier.preempted_in_progress}))
        elif tier.preempted_in_progress:  # killed while running, before any byte (llm-d's 429 evicted)
            out.append(Finding(kind="preempted_in_progress", severity="warning", tier=tier.name,
                               message=f"{tier.preempted_in_progress} {tier.name} request(s) were killed after "
                                       "admission, before their first token (llm-d revocation/eviction: 429 evicted)",
                               data={"count": 0, "in_progress": tier.preempted_in_progress}))
        gap = tier.starvation_max_gap_s
        if gap is not None and gap >= STARVATION_FINDING_S:
            out.append(Finding(kind="starvation", severity="warning", tier=tier.name,
                               message=f"{tier.name} had demand but got no service for {text.seconds(gap)}",
                               data={"max_gap_s": gap}))
        if tier.floor.passed is False:
            got = (f"{tier.name} got no goodput during saturation (no tier did)" if tier.floor.rate is None
                   else f"{tier.name} got {text.pct(tier.floor.share or 0.0)} of goodput during saturation")
            out.append(Finding(kind="floor", severity="error", tier=tier.name,
                               message=f"{got}, below its floor {text.pct(tier.floor.minimum or 0.0)}",
                               data={"share": tier.floor.share, "minimum": tier.floor.minimum}))
        fallback_served = sum(v for k, v in tier.routes.items() if k != "primary")
        if fallback_served and tier.by_class.get("served"):
            out.append(Finding(kind="fallback", severity="info", tier=tier.name,
                               message=f"{fallback_served} {tier.name} request(s) ended on a fallback route",
                               data={"routes": tier.routes}))
    return out


UNCLASSIFIED_SAMPLE = 60  # characters of the server's text a finding quotes


def _cut(text: str, limit: int = UNCLASSIFIED_SAMPLE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _unclassified_findings(attempts: pd.DataFrame, sc: RunScenario) -> list[Finding]:
    """One error per (tier, status, text) no rule of the profile knew: counted as not served, and named."""
    keys = ["tier", "status", "reason", "error", "in_band_error", "route"]
    rows = attempts.loc[eq(attempts["cls"], "unclassified"), [k for k in keys if k in attempts.columns]]
    if not len(rows):
        return []
    profiles = {"primary": normalise_profile(sc.profile)}
    profiles.update({k: normalise_profile(v) for k, v in sc.route_profiles.items()})
    frame = pd.DataFrame({k: (rows[k].astype(object) if k in rows.columns else None) for k in keys})
    counts: dict[tuple[str, int, str, str], int] = {}
    for key, n in frame.groupby(keys, dropna=False, sort=False).size().items():
        parts: tuple[Any, ...] = key if isinstance(key, tuple) else (key,)
        tier, status, reason, error, in_band, route = (_none_if_na(v) for v in parts)
        text = " | ".join(str(t) for t in ((in_band,) if in_band else (reason, error)) if t)
        code = int(float(status)) if status is not None else 0
        profile = profiles.get(str(route) if route else "primary", profiles["primary"])
        k = (str(tier), code, text, profile)
        counts[k] = counts.get(k, 0) + int(n)
    out = []
    for (tier, code, text, profile), n in sorted(counts.items(), key=lambda kv: -kv[1]):
        where = f"{code}" if code else "no status"
        if text and code == 200:
            where = "200 stream with in-band error"
        sample = f' "{_cut(text)}"' if text else " (no text)"
        out.append(Finding(
            kind="unclassified", severity="error", tier=tier,
            message=f"{n} × {where}{sample}: no rule for profile {profile} (counted as not served)",
            data={"count": n, "status": code, "text": _cut(text, 200), "profile": profile}))
    return out


def _named_findings(attempts: pd.DataFrame, sc: RunScenario) -> list[Finding]:
    """One error per (tier, cause) for failed answers a rule names (``Rule.finding``, e.g. tools refused)."""
    keys = ["tier", "status", "reason", "error", "in_band_error", "route"]
    rows = attempts.loc[eq(attempts["cls"], "failed"), [k for k in keys if k in attempts.columns]]
    if not len(rows):
        return []
    profiles = {"primary": normalise_profile(sc.profile)}
    profiles.update({k: normalise_profile(v) for k, v in sc.route_profiles.items()})
    frame = pd.DataFrame({k: (rows[k].astype(object) if k in rows.columns else None) for k in keys})
    counts: dict[tuple[str, str], tuple[int, int]] = {}
    for key, n in frame.groupby(keys, dropna=False, sort=False).size().items():
        parts: tuple[Any, ...] = key if isinstance(key, tuple) else (key,)
        tier, status, reason, error, in_band, route = (_none_if_na(v) for v in parts)
        code = int(float(status)) if status is not None else 0
        profile = profiles.get(str(route) if route else "primary", profiles["primary"])
        cause = named_cause(profile, status=code, reason=reason, error=error, in_band_error=in_band)
        if cause:
            seen, _ = counts.get((str(tier), cause), (0, code))
            counts[(str(tier), cause)] = (seen + int(n), code)
    return [Finding(kind="named_failure", severity="error", tier=tier,
                    message=f"{n} × {code}: {cause} (counted as failed, not served)",
                    data={"count": n, "status": code, "cause": cause})
            for (tier, cause), (n, code) in sorted(counts.items(), key=lambda kv: -kv[1][0])]


def classified_attempts(data: RunData, sc: RunScenario) -> pd.DataFrame:
    """Every attempt with its class (each route classified by its own stack profile) and derived times."""
    req = data.requests
    route_profile = {"primary": normalise_profile(sc.profile)}
    route_profile.update({k: normalise_profile(v) for k, v in sc.route_profiles.items()})
    if "route" in req.columns and isinstance(req["route"].dtype, pd.CategoricalDtype):
        # map the few route names, not a million rows of text
        names = req["route"].cat.categories
        table = np.array([route_profile.get(str(n), route_profile["primary"]) for n in names] +
                         [route_profile["primary"]], dtype=object)
        codes = req["route"].cat.codes.to_numpy()
        row_codes = np.where(codes < 0, len(names), codes)
        # the profile per row as a categorical built from the route codes (no factorising a million strings)
        uniques, inverse = np.unique(table.astype(str), return_inverse=True)
        profile_column = pd.Categorical.from_codes(inverse[row_codes], categories=pd.Index(uniques))
    else:
        routes = req["route"].astype(object).fillna("primary") if "route" in req.columns else pd.Series(
            "primary", index=req.index)
        profiles = routes.map(route_profile).fillna(route_profile["primary"])
        profile_column = pd.Categorical(profiles.to_numpy())
    out = prepare_attempts(req, classify_frame(req, pd.Series(profile_column, index=req.index)), inplace=True)
    out["profile"] = profile_column
    return out


@dataclass
class Audited:
    """One audit's result: the summary and, when asked for, the classified attempts table."""

    summary: Summary
    table: pa.Table | None = None


def audit_run(run_dir: Path, *, slo_file: Path | None = None, judge: str | None = None) -> Summary:
    """Audit a run folder and return its Summary (does not write it)."""
    return audit(run_dir, slo_file=slo_file, judge=judge).summary


def audit(run_dir: Path, *, slo_file: Path | None = None, judge: str | None = None,
          with_table: bool = False, table_writer: TableWriter | None = None) -> Audited:
    """Audit a run folder: its Summary, and its attempts table when ``with_table`` (nothing is written).

    ``table_writer``: handed the classified attempts as soon as they exist, to encode the table on a second
    thread while the summary is computed (the caller finishes or aborts it).
    """
    if judge not in (None, "point", "bound"):
        raise AuditError(f"judge must be 'point' or 'bound', not {judge!r}")
    data = load_run(Path(run_dir))
    sc = from_manifest(data.manifest)
    slo_override = load_slo_file(slo_file) if slo_file else None
    n_records = len(data.requests)
    all_attempts = classified_attempts(data, sc)  # adds columns to data.requests in place
    for name in _DERIVED_ONLY:  # read only to derive tpot and prompt size: 8 MB a column per million rows
        if name in all_attempts.columns:
            del all_attempts[name]
    # the table is built last: its rows are these (run data holds them anyway), and built here it would sit in
    # memory beside every per-tier copy
    every_attempt = all_attempts
    base = calibration.baseline(all_attempts)
    probes = eq(all_attempts["persona"], CALIBRATION_PERSONA)
    probe_rows = all_attempts[probes] if probes.any() else None  # the server counted them too (cross-check)
    attempts = all_attempts[~probes].reset_index(drop=True) if probes.any() else all_attempts
    del all_attempts
    attempts, twins = _split_twins(attempts)
    duration_s = _duration_s(data, attempts, sc)
    starts = sum(1 for e in data.events if e.get("name") == "worker_start")
    stops = sum(1 for e in data.events if e.get("name") == "worker_stop")
    # The second core (numpy and arrow let go of the GIL) first encodes the table, a row group at a time (one
    # group's arrow copy in memory), beside the fold; then validity and the routes, which only read the
    # attempts (and health, breakers), beside the tiers (each tier's rows a slice of the frames, not a copy).
    # Validity's temporaries (~150 MB at a million attempts) would sit on top of the fold's: it starts after it.
    written = table_writer.start(every_attempt) if table_writer is not None else None
    # ids are carried only where read: a million strings are the dearest columns to copy per tier
    ids = [c for c in ("request_id", "twin_of", *(("logical_id",) if twins is None else ())) if c in attempts.columns]
    logical = fold_logical(attempts.drop(columns=ids))
    pool = ThreadPoolExecutor(max_workers=1)
    beside = pool.submit(_validity_and_routes, attempts, data, duration_s, max(starts - stops, len(data.lost_workers)),
                         written)
    memory.trim()  # the fold's sort keys and index arrays: freed, handed back before the windows and tiers grow
    per_tier = attempts.drop(columns=[c for c in _NOT_PER_TIER if c in attempts.columns])
    # the measurement window: requests whose first intended send fell in an excluded phase leave the figures
    measured = phases.measured_mask(logical["first_intended_ns"], sc.phases)
    measured_att = (np.isin(attempts["logical_code"].to_numpy(), logical["logical_code"].to_numpy()[measured])
                    if not measured.all() else np.ones(len(attempts), dtype=bool))
    grid = timeline.make_grid(duration_s)
    anchor = data.mono_anchor_ns
    metrics = load_metrics(data.run_dir, anchor, data.manifest.wall_anchor_ns,
                           horizon_ns=duration_s * NS_PER_S)
    ratio = calibration.inflation_ratio(attempts, base)
    outages = scheduled_outages(data.manifest.scenario, duration_s)
    spans, windows = _windows(attempts, ratio, grid, metrics, outages)
    excluded = phases.excluded_spans(sc.phases)
    measured_s = (sum(float(p.get("end_s", 0.0)) - float(p.get("start_s", 0.0)) for p in sc.phases
                      if p.get("measured", True)) if excluded else None)
    ctx = Context(duration_s, grid, spans, base, sc, data.breakers, measured_s)
    infos = _tier_infos(sc, attempts, slo_override)
    priorities = {t.name: t.priority for t in infos}

    good_all = np.zeros(len(logical), dtype=bool)
    for info in infos:
        sel = eq(logical["tier"], info.name)
        good_all[sel] = _good_mask(logical[_GOOD_COLUMNS][sel], info.slo)
    # floor membership = the saturation slice's: the first intended send falls in a window (and is measured)
    sat_good_total = int((good_all & measured & timeline.in_windows(logical["first_intended_ns"], spans)).sum())
    tier_summaries, series, evidence = [], {}, []
    phase_verdicts: list[Verdict] = []
    token_gaps = _itl_gaps(data.run_dir, attempts, measured_att, sc)
    for info in infos:
        in_tier_att, in_tier_log = eq(attempts["tier"], info.name), eq(logical["tier"], info.name)
        att, log = rows_of(per_tier, in_tier_att), rows_of(logical, in_tier_log)
        lines = data.tasks[eq(data.tasks["tier"], info.name)] if len(data.tasks) else data.tasks
        if measured.all():  # no phase left out: the tier's frames as they are (a copy less of a million rows)
            tier = _tier_summary(info, att, log, lines, ctx, sat_good_total)
        else:
            tier = _tier_summary(info, per_tier[in_tier_att & measured_att], logical[in_tier_log & measured], lines,
                                 ctx, sat_good_total)
        tier.phases = _phase_slices(log.reset_index(drop=True), sc.phases)
        if token_gaps is not None:
            tier.latency.itl_ms = percentiles(token_gaps.get(info.name, np.empty(0)))
        if not measured.all():
            left = ~measured_att[in_tier_att]
            tier.excluded = Excluded(requests=int((~measured[in_tier_log]).sum()), attempts=int(left.sum()),
                                     by_class=_class_counts(log["cls"][~measured[in_tier_log]]),
                                     attempts_by_class=_class_counts(att["cls"][left]))
        tier_summaries.append(tier)
        if info.slo.phases:
            phase_verdicts += _phase_verdicts(info, att, log.reset_index(drop=True), ctx, sat_good_total, judge)
        series[info.name] = timeline.tier_series(att, grid)
        evidence += _evidence(attempts.loc[in_tier_att & attempts["unserved"].to_numpy(),
                                           [c for c in _EVIDENCE_COLUMNS if c in attempts.columns]], info.name)
        # a tier's slices are copies: gone before the next tier's are made (else two tiers' rows stay resident)
        del att, log, lines
        memory.trim()
    del per_tier
    try:  # collected only now: the tiers (slices of the frames, not copies) need not wait for it
        validity, route_summaries = beside.result()
    finally:
        pool.shutdown()
    if twins is not None:
        _priority_effects(tier_summaries, logical[measured], twins, sc)  # the measured requests only
    del logical  # nothing below reads the logical requests: their memory makes room for the table's
    memory.trim()

    inversions = fairness.find_inversions(attempts, priorities, spans, grid)
    # the server saw the twins too: in its totals, and per priority under the one it gave them
    checks, cross_findings = crosscheck(attempts, priorities, metrics, profile=sc.profile, probes=probe_rows,
                                        twins=twins, twin_priority=twin_priorities(sc.model_obj, sc.profile))
    timing_checks, timing_findings = check_timing(attempts, metrics)
    cross_findings = cross_findings + timing_findings
    validity = with_early_quits(validity, data.manifest.workers, data.manifest.stop_reason, data.manifest.error)
    clock = data.clock  # remote shards sit on the run's clock only as well as their wall clocks agree
    validity = validity.model_copy(update={
        "remote_shards": len(clock.remote_shards),
        "clock_offset_uncertainty_ms": None if clock.uncertainty_ns is None else clock.uncertainty_ns / 1e6})
    validity = with_shortfall(validity, data.events, data.health, validity.embedded_testbed)
    validity = with_doomed(validity, data.manifest)
    verdicts: list[Verdict] = []
    for info, tier in zip(infos, tier_summaries, strict=True):
        starved = starved_verdict(tier, info.slo, judge_of(info.slo, judge))  # first: a starved tier never passes
        verdicts += ([starved] if starved else []) + tier_verdicts(tier, info.slo, judge)
    verdicts += phase_verdicts
    for info in infos:  # after the phases' checks: a tier is NOT JUDGED only if none of them judged anything
        marker = not_judged_verdict(info.name, verdicts, info.slo, judge_of(info.slo, judge))
        verdicts += [marker] if marker else []
    verdicts += abort_verdicts(data.manifest)
    bypass_findings, bypass_verdicts = bypass_check(tier_summaries, metrics)  # after the twins' effects
    verdicts += bypass_verdicts
    capped = _fairness_capped(attempts, sc, metrics)
    passed, code = exit_code(validity, verdicts)
    findings = (_unclassified_findings(attempts, sc) + _named_findings(attempts, sc)
                + fairness.inversion_findings(inversions)
                + _findings(tier_summaries) + cross_findings + bypass_findings + ([capped] if capped else []))
    if validity.truncated_shards or validity.skipped_lines:
        findings.append(Finding(
            kind="unreadable_lines", severity="warning", tier=None,
            message=f"{validity.skipped_lines} record line(s) could not be read and were skipped "
                    f"({validity.truncated_shards} shard(s) ended mid-line: a writer was killed); "
                    "the figures leave those requests out",
            data={"skipped_lines": validity.skipped_lines, "truncated_shards": validity.truncated_shards}))
    if not validity.valid:
        findings.insert(0, Finding(kind="invalid", severity="error", tier=None,
                                   message="run invalid for latency claims: " + "; ".join(validity.reasons)
                                   + (f" ({validity.cause})" if validity.cause else ""),
                                   data={"reasons": validity.reasons, "remedies": validity.remedies}))
    elif validity.warnings:  # generator trouble that moved no recorded time: said, not voided
        findings.insert(0, Finding(kind="generator_lag", severity="warning", tier=None,
                                   message="; ".join(validity.warnings)
                                   + (f" ({validity.cause})" if validity.cause else ""),
                                   data={"warnings": validity.warnings, "remedies": validity.remedies}))
    findings += _masked_findings(tier_summaries, route_summaries, duration_s)
    breaker_rows = merged_breaker_changes([
        {"t_s": float(r["ts_ns"]) / NS_PER_S, "route": str(r["route"]), "state": str(r["state"]),
         "previous": _none_if_na(r["previous"]), "cause": _none_if_na(r["cause"])}
        for r in data.breakers.sort_values("ts_ns").to_dict("records")
    ])
    summary = Summary(
        run=_run_info(data, sc, duration_s, max(0, starts - stops)),
        validity=validity,
        tiers=tier_summaries,
        windows=windows,
        timeline=Timeline(bucket_s=grid.bucket_s, t=grid.starts(), tiers=series,
                          server=server_series(metrics, grid), breaker=breaker_rows),
        findings=findings,
        verdicts=verdicts,
        passed=passed,
        exit_code=code,
        routes=route_summaries,
        crosscheck=checks,
        evidence=evidence,
        records=n_records,
        tasks=len(data.tasks),
        measurement=Measurement(
            measured_phases=[str(p.get("name", "")) for p in sc.phases if p.get("measured", True)],
            excluded_phases=[name for name, _, _ in excluded],
            excluded_spans=[[a, b] for _, a, b in excluded],
            measured_s=measured_s,
            excluded_requests=int((~measured).sum()), excluded_attempts=int((~measured_att).sum()),
        ),
        outages=outages,
        spend=spend(attempts, data.manifest.scenario, data.manifest.budget_usage),
        waits=wait_splits(attempts[measured_att], [info.name for info in infos]),
        waits_by_phase=phase_splits(attempts, [info.name for info in infos],
                                    [str(p.get("name", "")) for p in sc.phases],
                                    phases.phase_of(attempts["intended_ns"], sc.phases)),
        timing_checks=timing_checks,
    )
    del attempts
    return Audited(summary, build_table(every_attempt) if with_table else None)


def _itl_gaps(run_dir: Path, attempts: pd.DataFrame, measured: np.ndarray, sc: RunScenario
              ) -> dict[str, np.ndarray] | None:
    """Per tier, the pooled inter-token gaps of its measured served attempts; None when the run recorded no token
    times (a second read of the shards, only then: the bulk parser leaves ``token_ns`` out)."""
    if sc.model_obj is None or not sc.model_obj.record_token_times or "request_id" not in attempts.columns:
        return None
    mask = eq(attempts["cls"], "served") & measured
    ids, tiers = attempts["request_id"].to_numpy()[mask], attempts["tier"].to_numpy()[mask]
    return itl.pooled_gaps(run_dir, dict(zip(map(str, ids), map(str, tiers), strict=True)))


def _validity_and_routes(attempts: pd.DataFrame, data: RunData, duration_s: float, workers_lost: int,
                         after: Future[Any] | None = None) -> tuple[Validity, list[RouteSummary]]:
    """The run's validity (before the workers' early quits and shortfalls) and its routes: both only read.

    ``after``: started once it is done (the table's encode: the two share the second core).
    """
    if after is not None:
        wait([after])  # its failure is the audit's caller's to raise (``TableWriter.finish``)
    validity = check_validity(attempts, data.health, skipped_lines=data.skipped_lines,
                              truncated_shards=data.truncated_shards, workers_lost=workers_lost,
                              duration_s=duration_s, lost_names=data.lost_workers,
                              embedded_testbed=bool(data.manifest.testbed_pid or data.manifest.testbeds))
    memory.trim()  # its temporaries (~90 MB at a million attempts) back to the kernel before the routes' own
    routes = _routes(attempts, data.breakers, duration_s * NS_PER_S)
    memory.trim()
    return validity, routes


def _split_twins(attempts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The tiers' own attempts and the priority control's twins (None without any): twins count in no tier figure."""
    mask = control.is_twin(attempts)
    if not mask.any():
        return attempts, None
    return attempts[~mask].reset_index(drop=True), attempts[mask].reset_index(drop=True)


def _fairness_capped(attempts: pd.DataFrame, sc: RunScenario, metrics: ServerMetrics) -> Finding | None:
    """The router's per-tenant metrics past their label cap (audit/fairness_cap.py); twins are tenants' too."""
    try:
        stack_metrics = stacks.get(sc.profile).metrics
    except KeyError:
        return None
    if stack_metrics.fairness_cap is None or "tenant" not in attempts.columns:
        return None
    sent = attempts[~attempts["not_sent"].fillna(False).to_numpy(dtype=bool)] if "not_sent" in attempts.columns \
        else attempts
    tenants = {str(t) for t in pd.unique(sent["tenant"].astype(object)) if t is not None and t == t}
    return fairness_cap_finding(tenants, stack_metrics, metrics)


def _priority_effects(tiers: list[TierSummary], logical: pd.DataFrame, twins: pd.DataFrame, sc: RunScenario) -> None:
    """Each tier with twins gets its ``priority_effect`` (audit/control.py)."""
    folded = fold_logical(twins.assign(logical_code=pd.factorize(twins["logical_id"].astype(str))[0]))
    model = sc.model_obj
    for tier in tiers:
        own = logical[eq(logical["tier"], tier.name)]
        mine = folded[eq(folded["tier"], tier.name)]
        if len(mine) == 0:
            continue
        spec = model.control_for(tier.name) if model is not None else None
        neutral = model.neutral_priority(spec) if model is not None and spec is not None else None
        try:
            wire = dataclasses.asdict(stacks.get(sc.profile).wire)
        except KeyError:
            wire = {}
        described = control.describe_control(wire, neutral, spec.objective if spec is not None else None)
        if wire.get("priority_body") and neutral == tier.priority:
            described += ": the tier's own priority, so no contrast by construction"
        tier.priority_effect = control.priority_effect(tier.name, control.pair(own, mine, twins), described)


def write_summary(summary: Summary, run_dir: Path) -> Path:
    """Write ``summary.json`` atomically."""
    path = Path(run_dir) / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(summary.model_dump_json(by_alias=True, indent=1))
    tmp.replace(path)
    return path
