"""The testbed's ground-truth ledger, and a comparison of the audit against it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from rushhour.audit import text
from rushhour.audit.build import classified_attempts
from rushhour.audit.control import is_twin
from rushhour.audit.fold import CALIBRATION_PERSONA, NS_PER_MS
from rushhour.audit.load import load_run, read_jsonl_frame
from rushhour.audit.scenario import from_manifest
from rushhour.audit.summary import OUTCOME_CLASSES, Summary

LEDGER_FILE = "testbed-ledger.jsonl"
# The fields the comparison needs, typed; anything else the testbed writes is inferred (or dropped
# when its type varies between lines, e.g. ``in_band_error`` as false or as a text).
LEDGER_SCHEMA = pa.schema([
    ("request_id", pa.string()), ("arrival_ns", pa.int64()), ("dispatch_ns", pa.int64()),
    ("first_token_ns", pa.int64()), ("end_ns", pa.int64()), ("queue_wait_ns", pa.int64()),
    ("priority", pa.int64()), ("tenant", pa.string()), ("status", pa.int64()), ("reason", pa.string()),
    ("outcome", pa.string()), ("output_tokens", pa.int64()), ("cached_tokens", pa.int64()),
    ("preemptions", pa.int64()),
])
# Classes only the client can see: no ledger line is expected for them.
CLIENT_ONLY = ("not_sent", "transport")
# The server logs a client that gave up as ``cancelled``; the client knows it was its own timeout, or
# that the generator stopped while the request was in flight (``unfinished``).
EQUIVALENT = {"timeout": "cancelled", "unfinished": "cancelled", "abandoned": "cancelled"}
TTFT_QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def load_ledger(path: Path) -> pd.DataFrame:
    """The ledger as a DataFrame (raw CLOCK_MONOTONIC ns); malformed or truncated lines are skipped."""
    frame, skipped = read_jsonl_frame(Path(path), LEDGER_SCHEMA, extra="infer")
    if skipped:
        # some free field changed type between lines: keep the typed core for every line instead
        frame, skipped = read_jsonl_frame(Path(path), LEDGER_SCHEMA, extra="ignore")
    frame.attrs["skipped_lines"] = skipped
    return frame


@dataclass
class LedgerComparison:
    """Per tier: the audit's attempt classes vs the ledger's outcomes, and TTFT percentiles of both."""

    audit_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    ledger_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    ttft_ms: dict[str, dict[str, tuple[float | None, float | None]]] = field(default_factory=dict)
    mismatched: list[dict[str, object]] = field(default_factory=list)  # request_id, tier, audit, ledger
    missing_in_ledger: list[str] = field(default_factory=list)
    unmatched_ledger: int = 0
    arrival_offset_ms_p50: float | None = None  # server arrival − client send, after anchor alignment

    def count_problems(self) -> list[str]:
        problems = []
        for tier in sorted(set(self.audit_counts) | set(self.ledger_counts)):
            a, b = self.audit_counts.get(tier, {}), self.ledger_counts.get(tier, {})
            for cls in sorted(set(a) | set(b)):
                if a.get(cls, 0) != b.get(cls, 0):
                    problems.append(f"{tier}/{cls}: audit {a.get(cls, 0)} vs ledger {b.get(cls, 0)}")
        if self.missing_in_ledger:
            problems.append(f"{len(self.missing_in_ledger)} server-visible attempts have no ledger line "
                            f"(e.g. {self.missing_in_ledger[:3]})")
        return problems

    def ttft_problems(self, rel: float = 0.05, abs_ms: float = 5.0) -> list[str]:
        problems = []
        for tier, table in self.ttft_ms.items():
            for q, (audit_v, ledger_v) in table.items():
                if audit_v is None or ledger_v is None:
                    if audit_v != ledger_v:
                        problems.append(f"{tier} ttft {q}: audit {audit_v} vs ledger {ledger_v}")
                    continue
                if abs(audit_v - ledger_v) > max(abs_ms, rel * ledger_v):
                    problems.append(f"{tier} ttft {q}: audit {text.ms(audit_v)} vs ledger {text.ms(ledger_v)}")
        return problems


def _fold_equivalent(cls: str) -> str:
    return EQUIVALENT.get(cls, cls)


def _run_ledgers(run_dir: Path) -> pd.DataFrame:
    """The run's ledgers: the primary's and every fallback route's own (``testbed-ledger-<route>.jsonl``)."""
    paths = [run_dir / LEDGER_FILE, *sorted(run_dir.glob("testbed-ledger-*.jsonl"))]
    frames = [load_ledger(p) for p in paths if p.exists()]
    if len(frames) <= 1:
        return frames[0] if frames else load_ledger(run_dir / LEDGER_FILE)
    return pd.concat(frames, ignore_index=True)


def compare_with_ledger(run_dir: Path, summary: Summary, ledger_path: Path | None = None) -> LedgerComparison:
    """Join the run's attempts to the ledger by request id and compare classes and TTFT per tier."""
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    sc = from_manifest(data.manifest)
    attempts = classified_attempts(data, sc)
    # the idle probes and the priority control's twins count in no tier figure: both sides leave them out
    # (their ledger lines are held by their records, so they are not "seen by the server only" either)
    aside = (attempts["persona"].astype(object) == CALIBRATION_PERSONA).to_numpy() | is_twin(attempts)
    aside_ids = set(attempts.loc[aside, "request_id"].astype(str))
    attempts = attempts[~aside]
    ledger = load_ledger(ledger_path) if ledger_path else _run_ledgers(run_dir)
    ledger = ledger[~ledger["request_id"].astype(str).isin(aside_ids).to_numpy()]
    anchor = float(data.mono_anchor_ns or 0)
    left = pd.DataFrame({"request_id": attempts["request_id"].astype(str).to_numpy(),
                         "tier": attempts["tier"].astype(str).to_numpy(),
                         "cls": attempts["cls"].astype(str).to_numpy(),
                         "sent_ns": attempts["sent_ns"].to_numpy(dtype=np.float64)})
    right = pd.DataFrame({"request_id": ledger["request_id"].astype(str).to_numpy(),
                          "outcome": ledger["outcome"].astype(str).to_numpy(),
                          "arrival_ns": ledger["arrival_ns"].astype("float64").to_numpy() - anchor,
                          "ttft_ns": (ledger["first_token_ns"].astype("float64")
                                      - ledger["arrival_ns"].astype("float64")).to_numpy()})
    joined = left.merge(right, on="request_id", how="left", indicator=True)
    out = LedgerComparison()
    server_visible = ~joined["cls"].isin(CLIENT_ONLY)
    out.missing_in_ledger = joined.loc[server_visible & (joined["_merge"] == "left_only"), "request_id"].tolist()
    out.unmatched_ledger = int((~right["request_id"].isin(left["request_id"])).sum())
    both = joined[(joined["_merge"] == "both") & server_visible]
    audit_cls = both["cls"].map(_fold_equivalent)
    ledger_cls = both["outcome"].map(_fold_equivalent)
    out.audit_counts = audit_counts_from_summary(summary)
    for tier_name, part in both.groupby("tier"):
        counts = ledger_cls[part.index].value_counts()
        out.ledger_counts[str(tier_name)] = {str(k): int(v) for k, v in counts.items()}
    bad = both[audit_cls != ledger_cls]
    out.mismatched = [{"request_id": r.request_id, "tier": r.tier, "audit": r.cls, "ledger": r.outcome}
                      for r in bad.head(50).itertuples(index=False)]
    # Clock alignment: server arrival (re-based on the run anchor) minus client send, per request.
    offset = (both["arrival_ns"] - both["sent_ns"]).to_numpy(dtype=np.float64) / NS_PER_MS
    offset = offset[np.isfinite(offset)]
    out.arrival_offset_ms_p50 = float(np.median(offset)) if len(offset) else None
    # TTFT: the ledger's arrival → first token of served requests vs the audit's, per tier
    served_rows = (attempts["cls"].astype(str) == "served").to_numpy()
    audit_ttft = attempts["ttft_ns"].to_numpy(dtype=np.float64) / NS_PER_MS
    audit_tier = attempts["tier"].astype(str).to_numpy()
    audit_served = {t.name: audit_ttft[served_rows & (audit_tier == t.name) & np.isfinite(audit_ttft)]
                    for t in summary.tiers}
    for tier in summary.tiers:
        served = both[(both["tier"] == tier.name) & (both["outcome"] == "served")]
        values = served["ttft_ns"].to_numpy(dtype=np.float64) / NS_PER_MS
        values = values[np.isfinite(values)]
        table: dict[str, tuple[float | None, float | None]] = {}
        for name, q in TTFT_QUANTILES.items():
            ledger_v = float(np.quantile(values, q)) if len(values) else None
            mine = audit_served[tier.name]
            # like with like: the served requests' TTFT (the summary's figure also weighs the waits
            # the run cut, as censored observations, which the ledger's served rows cannot show)
            table[name] = (float(np.quantile(mine, q)) if len(mine) else None, ledger_v)
        out.ttft_ms[tier.name] = table
    return out


def audit_counts_from_summary(summary: Summary) -> dict[str, dict[str, int]]:
    """The summary's attempts per class per tier, minus client-only classes (for cross-reading).

    The ledger saw every request, so attempts the measurement window left out are added back.
    """
    out: dict[str, dict[str, int]] = {}
    for tier in summary.tiers:
        counts: dict[str, int] = {}
        whole = dict(tier.attempts_by_class)
        for cls, n in (tier.excluded.attempts_by_class if tier.excluded else {}).items():
            whole[cls] = whole.get(cls, 0) + n
        for cls, n in whole.items():
            if n and cls not in CLIENT_ONLY and cls in OUTCOME_CLASSES:
                counts[_fold_equivalent(cls)] = counts.get(_fold_equivalent(cls), 0) + n
        if counts:
            out[tier.name] = counts
    return out
