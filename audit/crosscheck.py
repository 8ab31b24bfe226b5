"""Client counts against the server's own counters, per the stack profile's checks (stacks/<name>.py).

Each ``CounterCheck`` names a server counter, the labels to keep, and what the client counts for it
(``served``, ``admitted``, an outcome class, ``status:429``, ``match:<regex>`` on the error texts,
``no_endpoints``, ``cut``: 2xx streams cut before their end; ``a+b`` sums). The server's value is
the counter's increase from the first scrape (the baseline) to the last, against the client's attempts
that ended after the baseline; with a single scrape, the counter's value against every attempt (a
fresh server). Attempts still open at the last scrape, or that ended just after the baseline, are the
tolerance. Per tier where the counter
is labelled by the tier (``by``: llm-d's ``priority``, a gateway's key alias or team named like the
tier), else in total. A mismatch is a finding.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from rushhour import stacks
from rushhour.audit import text
from rushhour.audit.fold import NS_PER_S, eq, isin
from rushhour.audit.metrics import ServerMetrics
from rushhour.audit.summary import OUTCOME_CLASSES, CrossCheck, Finding
from rushhour.scenarios.model import Scenario
from rushhour.stacks import CounterCheck

ALL_TIERS = "all"
# a server counts an answer a little before the client has read it: attempts that ended this soon
# after the baseline scrape may be in the baseline or not (part of the tolerance)
BASELINE_RACE_NS = 0.25 * NS_PER_S


def client_count(part: pd.DataFrame, kind: str) -> int:
    """How many attempts of ``part`` the client counts as ``kind`` (``a+b``: the sum of both)."""
    if "+" in kind:
        return sum(client_count(part, k) for k in kind.split("+"))
    if kind == "admitted":
        status = part["status"].to_numpy(dtype=np.float64)
        admitted = (((status >= 200) & (status < 300)) | eq(part["cls"], "preempted")
                    | part["first_token_ns"].notna().to_numpy())
        return int(admitted.sum())
    if kind == "cut":  # a 2xx stream cut before its end marker (a server's kill or the network: unknown)
        status = part["status"].to_numpy(dtype=np.float64)
        return int((eq(part["cls"], "failed") & (status >= 200) & (status < 300)).sum())
    if kind == "no_endpoints":
        return int(eq(part["reason"], "rejected-no-endpoints").sum())
    if kind.startswith("match:"):  # the server's text (error or in-band error) says which limit it was
        hit = np.zeros(len(part), dtype=bool)
        for column in ("error", "in_band_error"):
            if column in part.columns:
                hit |= _contains(part[column], kind[6:])
        return int(hit.sum())
    if kind.startswith("status:"):
        return int((part["status"].to_numpy(dtype=np.float64) == float(kind[7:])).sum())
    if kind in OUTCOME_CLASSES:
        return int(eq(part["cls"], kind).sum())
    raise ValueError(f"unknown client count {kind!r}")


def _contains(series: pd.Series, pattern: str) -> np.ndarray:
    """``pattern`` (a case-insensitive regex) found in each value; through the categories when categorical."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        found = np.asarray(series.cat.categories.astype(str).str.contains(pattern, case=False, regex=True),
                           dtype=bool)
        codes = series.cat.codes.to_numpy()
        return np.where(codes >= 0, found[np.maximum(codes, 0)], False) if len(found) else np.zeros(len(series), bool)
    return series.astype(object).fillna("").astype(str).str.contains(pattern, case=False, regex=True).to_numpy(bool)


def counter_series(metrics: ServerMetrics, check: CounterCheck) -> tuple[str, pd.DataFrame] | None:
    """The first of the check's counter names that was scraped, with its samples' labels parsed."""
    for name in check.names:
        part = metrics.samples[metrics.samples["name"] == name]
        if len(part):
            labels = [json.loads(key) if key.startswith("{") else _legacy_labels(key) for key in part["labels"]]
            keep = np.ones(len(part), dtype=bool)
            for label, values in check.select.items():
                keep &= np.array([str(lab.get(label)) in values for lab in labels], dtype=bool)
            for label, values in check.exclude.items():
                keep &= np.array([str(lab.get(label)) not in values for lab in labels], dtype=bool)
            by = [str(lab.get(check.by, "")) if check.by else "" for lab in labels]
            frame = pd.DataFrame({"ts_ns": part["ts_ns"].to_numpy(), "series": part["labels"].to_numpy(),
                                  "by": by, "value": part["value"].to_numpy()})[keep]
            return name, frame
    return None


def _legacy_labels(key: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in key.split(",") if "=" in kv)


def counter_increase(frame: pd.DataFrame, scrapes: np.ndarray) -> tuple[pd.Series, float, float | None]:
    """Per ``by`` value: the counter's increase between the first and the last scrape (the last value
    alone when there is one scrape: a fresh server), the last scrape's time and the baseline's (ns).

    ``scrapes``: the times of every good scrape. A counter a server creates on its first event (LiteLLM's)
    is absent from the scrapes before it: there its value was 0, so the first good scrape is the baseline.
    """
    last_ts = float(frame["ts_ns"].max())
    first_ts = float(frame["ts_ns"].min())
    per = frame.groupby(["ts_ns", "series", "by"])["value"].sum()
    last = per.xs(last_ts, level="ts_ns")
    earliest = float(scrapes.min()) if len(scrapes) else first_ts
    if earliest < first_ts:
        return last.groupby(level="by").sum(), last_ts, earliest
    if first_ts == last_ts:
        return last.groupby(level="by").sum(), last_ts, None
    last = last - per.xs(first_ts, level="ts_ns").reindex(last.index).fillna(0.0)
    return last.groupby(level="by").sum(), last_ts, first_ts


TWINS_LABEL = "control twins"  # a per-priority group that only the priority control's twins fill


def _groups(check: CounterCheck, by_values: list[str], priorities: dict[str, int],
            twin_priorities: set[int] | None = None) -> list[tuple[str, int | None, list[str], list[str]]]:
    """(label shown, priority, tiers, counter label values) per comparison."""
    tiers = list(priorities)
    if check.by == "priority":
        by_priority: dict[int, list[str]] = {}
        for tier, prio in priorities.items():
            by_priority.setdefault(prio, []).append(tier)
        for prio in twin_priorities or ():  # the twins' own bucket, where no tier has that priority
            by_priority.setdefault(prio, [])
        return [("+".join(names) or TWINS_LABEL, prio, names, [str(prio)])
                for prio, names in sorted(by_priority.items(), reverse=True)]
    if check.by and set(by_values) & set(tiers):  # the gateway's key alias / team is named like the tier
        # every tier, also one the counter has no series for (its server count is 0, not "unknown")
        return [(tier, priorities[tier], [tier], [tier]) for tier in tiers]
    return [(ALL_TIERS, None, tiers, by_values)]


def twin_priorities(scenario: Scenario | None, profile: str | None) -> dict[str, int | None]:
    """Per tier with a priority control, the priority the server files its twins under (rushhour's polarity;
    None: the client cannot know). On a header stack a twin carries the control's objective, or none: no
    header, or an objective the stack does not know, gets the stack's default priority; an objective that
    is one of the tiers' gets that tier's priority; any other is an objective only the server knows. On a
    body-priority stack the twin carries the neutral priority (loadgen/control.py)."""
    if scenario is None:
        return {}
    try:
        wire = stacks.get(profile).wire
    except KeyError:
        wire = stacks.get(None).wire
    objectives = {t.objective or t.name: t.priority for t in scenario.tiers}
    out: dict[str, int | None] = {}
    for tier in scenario.tiers:
        control = scenario.control_for(tier.name)
        if control is None:
            continue
        if wire.objective_header or wire.priority_header:
            out[tier.name] = (wire.default_priority if control.objective is None
                              else objectives.get(control.objective))
        else:
            out[tier.name] = scenario.neutral_priority(control)
    return out


def crosscheck(
    attempts: pd.DataFrame, priorities: dict[str, int], metrics: ServerMetrics, profile: str | None = None,
    probes: pd.DataFrame | None = None, twins: pd.DataFrame | None = None,
    twin_priority: dict[str, int | None] | None = None,
) -> tuple[list[CrossCheck], list[Finding]]:
    """Compare the profile's counters with the client's counts (``probes``: calibration requests the
    server saw too; they count in totals; ``twins``: the priority control's copies, which count in totals
    and, on per-priority counters, under the priority ``twin_priority`` says the server gave them)."""
    if metrics.empty or len(attempts) == 0:
        return [], []
    try:
        stack = stacks.get(profile)
    except KeyError:
        stack = stacks.get(None)
    sent = _primary(attempts)
    extra = _primary(probes) if probes is not None and len(probes) else None
    copies = _primary(twins) if twins is not None and len(twins) else None
    twin_priority = twin_priority or {}
    checks: list[CrossCheck] = []
    findings: list[Finding] = []
    for check in stack.metrics.checks:
        found = counter_series(metrics, check)
        if found is None:
            # the server exposes none of the counter's names (an older release, a metric turned off): the check
            # was not made, and a reader must not take its silence for agreement
            missing = unmeasured(check, sent, stack.name)
            if missing is not None:
                findings.append(missing)
            continue
        name, frame = found
        if len(frame) == 0:
            continue
        server_by, last_ns, base_ns = counter_increase(frame, np.asarray(metrics.scrape_ts_ns, dtype=np.float64))
        twin_buckets = {p for p in twin_priority.values() if p is not None} if copies is not None else set()
        for label, prio, tiers, values in _groups(check, list(server_by.index.astype(str)), priorities,
                                                  twin_buckets):
            part = sent[isin(sent["tier"], tiers)]
            if extra is not None and label == ALL_TIERS:
                part = pd.concat([part, extra], ignore_index=True)
            unknown = 0  # twins filed under a priority the client cannot know: each may be in this group or not
            if copies is not None:
                if label == ALL_TIERS:
                    part = pd.concat([part, copies], ignore_index=True)
                elif check.by == "priority":
                    theirs = [t for t, p in twin_priority.items() if p == prio]
                    lost = [t for t, p in twin_priority.items() if p is None]
                    part = pd.concat([part, copies[isin(copies["tier"], theirs)]], ignore_index=True)
                    unknown = int(isin(copies["tier"], lost).sum())
            ends = part["t_end_ns"].to_numpy(dtype=np.float64)
            pending = int((ends > last_ns).sum())  # still open at the last scrape: counted or not
            if base_ns is not None:  # what ended before the baseline scrape is in the baseline
                starts = part["sent_ns"].to_numpy(dtype=np.float64)
                # open at the baseline (a server counts some events at admission, others at the end),
                # or ended just after it (the server counts a little before the client reads the answer)
                pending += int(((starts < base_ns) & (ends >= base_ns)).sum()
                               + ((starts >= base_ns) & (ends >= base_ns) & (ends < base_ns + BASELINE_RACE_NS)).sum())
                part = part[~(ends < base_ns)]
            client = client_count(part, check.client)
            server = float(server_by.reindex(values).fillna(0.0).sum())
            if server == 0 and client == 0:
                continue
            pending += unknown
            if check.unsure:  # attempts the server may have counted here or not (a cut stream: its kill or not)
                pending += client_count(part, check.unsure)
            ok = abs(client - server) <= pending
            selector = ",".join(f"{k}={'|'.join(v)}" for k, v in check.select.items())
            metric = f"{name}{{{selector}}}" if selector else name
            checks.append(CrossCheck(tier=label, priority=prio, metric=metric, client=client, server=server,
                                     matches=ok))
            if not ok:
                where = f"priority {prio}" if check.by == "priority" else (
                    "in total" if label == ALL_TIERS else f"{check.by}={label}")
                findings.append(Finding(
                    kind="crosscheck", severity="warning", tier=None if label in (ALL_TIERS, TWINS_LABEL) else label,
                    message=f"{label}: client counted {client} {check.client} but the server's {metric} rose by "
                            f"{text.whole(server)} {where} (tolerance {pending} in flight at the last scrape)",
                    data={"priority": prio, "metric": metric, "client_count": check.client, "client": client,
                          "server": server, "in_flight_tolerance": pending, "profile": stack.name},
                ))
    return checks, findings


def unmeasured(check: CounterCheck, sent: pd.DataFrame, profile: str) -> Finding | None:
    """The finding for a counter check the server's metrics cannot answer, when the client counted events for it."""
    client = client_count(sent, check.client)
    if client == 0:
        return None
    names = " / ".join(check.names)
    return Finding(kind="crosscheck_unmeasured", severity="info", tier=None,
                   message=f"not cross-checked: the client counted {client} {check.client} but the server exposes no "
                           f"{names}, so no server count agrees or disagrees with it",
                   data={"metric": names, "client_count": check.client, "client": client, "profile": profile})


def _primary(frame: pd.DataFrame) -> pd.DataFrame:
    """Sent attempts of the primary route (the scraped metrics are the primary's; fallbacks are other stacks)."""
    keep = ~frame["not_sent"].to_numpy(dtype=bool)
    if "route" in frame.columns:
        route = frame["route"]
        if isinstance(route.dtype, pd.CategoricalDtype):  # decided per route name, mapped by code (null: primary)
            primary = np.append(np.asarray(route.cat.categories.astype(object) == "primary", dtype=bool), True)
            keep &= primary[route.cat.codes.to_numpy()]
        else:
            keep &= (route.astype(object).fillna("primary") == "primary").to_numpy()
    # only the columns the counts read: filtering the whole frame would copy every column
    return frame.loc[keep, [c for c in _COUNTED if c in frame.columns]]


_COUNTED = ("tier", "route", "t_end_ns", "sent_ns", "status", "cls", "first_token_ns", "reason", "error",
            "in_band_error")
