"""Where each tier waited: a served attempt's time from its intended send to its first token, split (pure).

Parts, as far as the stack reported them (stacks/timing.py; a part not reported is "not reported", never 0):

* ``client``: schedule lag and connection, intended send → the request written (the record's own times);
* ``gateway``: the gateway's queue (the testbed's llm-d flow control) or, behind LiteLLM, the proxy's own time;
* ``engine_queue``: vLLM's ``queue_time_ms`` (queued → scheduled);
* ``prefill``: vLLM's ``time_to_first_token_ms`` (scheduled → first token: the queue is not in it);
* ``decode``: vLLM's ``generation_time_ms`` (first token → last), on whole (non-streamed) answers only: their
  first byte comes after the last token, so the client's "first token" holds the decode too;
* ``rest``: what the reported parts leave unexplained (network, a server's own handling, and any part the stack
  did not report), only where a server part was reported.

Only served attempts are split (an unfinished request has no first token: its wait is censored in the
tier's TTFT, not here); the priority control's twins are left out as everywhere else.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit import text
from rushhour.audit.summary import TierWaits, WaitPart

PARTS = ("client", "gateway", "engine_queue", "prefill", "decode", "rest")
QUANTILES = (50, 90, 99)
NS_PER_MS = 1e6


def part_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each part of every row, in ms (NaN: not reported), and ``total`` (intended send → first token)."""
    def col(name: str) -> np.ndarray:
        if name not in frame.columns:
            return np.full(len(frame), np.nan)
        return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)

    intended, sent, first = col("intended_ns"), col("sent_ns"), col("first_token_ns")
    total = (first - intended) / NS_PER_MS
    client = (sent - intended) / NS_PER_MS
    gateway = col("gateway_queue_ms")
    gateway = np.where(np.isnan(gateway), col("litellm_overhead_duration_ms"), gateway)
    engine_queue, prefill = col("metrics_queue_time_ms"), col("metrics_time_to_first_token_ms")
    whole = (~frame["stream"].astype("boolean").fillna(True).to_numpy(dtype=bool) if "stream" in frame.columns
             else np.zeros(len(frame), dtype=bool))
    decode = np.where(whole, col("metrics_generation_time_ms"), np.nan)
    engine = np.nan_to_num(engine_queue) + np.nan_to_num(prefill) + np.nan_to_num(decode)
    reported = ~np.isnan(engine_queue) | ~np.isnan(prefill) | ~np.isnan(gateway)
    rest = np.where(reported, total - client - np.nan_to_num(gateway) - engine, np.nan)
    return {"total": total, "client": client, "gateway": gateway, "engine_queue": engine_queue,
            "prefill": prefill, "decode": decode, "rest": rest}


def tier_waits(tier: str, frame: pd.DataFrame) -> TierWaits:
    """The split of one tier's served attempts (``frame``: its attempts, any class)."""
    served = frame["served"].to_numpy(dtype=bool) if "served" in frame.columns else np.zeros(len(frame), bool)
    if "control" in frame.columns:
        served = served & ~frame["control"].fillna(False).to_numpy(dtype=bool)
    cols = {name: values[served] for name, values in part_columns(frame).items()}
    total = cols["total"]
    ok = ~np.isnan(total)
    total_sum = float(total[ok].sum())
    parts: list[WaitPart] = []
    for name in PARTS:
        values = cols[name]
        seen = ok & ~np.isnan(values)
        n = int(seen.sum())
        if n == 0:
            parts.append(WaitPart(part=name, reported=0, not_reported=int(ok.sum())))
            continue
        p50, p90, p99 = (float(v) for v in np.percentile(values[seen], QUANTILES))
        denominator = float(total[seen].sum())
        parts.append(WaitPart(part=name, reported=n, not_reported=int(ok.sum()) - n, p50_ms=p50, p90_ms=p90,
                              p99_ms=p99, sum_ms=float(values[seen].sum()),
                              share=float(values[seen].sum()) / denominator if denominator > 0 else None))
    p50_total = float(np.percentile(total[ok], 50)) if ok.any() else None
    return TierWaits(tier=tier, served=int(ok.sum()), total_p50_ms=p50_total, total_sum_ms=total_sum, parts=parts)


def wait_splits(attempts: pd.DataFrame, tiers: list[str]) -> list[TierWaits]:
    """Every tier's split, in the tiers' order; empty when no attempt reported any server timing."""
    out = [tier_waits(tier, attempts[(attempts["tier"] == tier).to_numpy()]) for tier in tiers]
    server = ("gateway", "engine_queue", "prefill")
    if not any(p.reported for w in out for p in w.parts if p.part in server):
        return []
    return out


def phase_splits(attempts: pd.DataFrame, tiers: list[str], phases: list[str], phase_index: np.ndarray
                 ) -> list[TierWaits]:
    """The split per phase (``phase_index``: each attempt's phase, −1 none), phase by phase in the tiers' order;
    empty with fewer than two phases or when no attempt reported any server timing."""
    if len(phases) < 2:
        return []
    out: list[TierWaits] = []
    for i, name in enumerate(phases):
        found = wait_splits(attempts[phase_index == i], tiers)
        out += [w.model_copy(update={"phase": name}) for w in found if w.served]
    return out


def sentence(waits: TierWaits) -> str:
    """'batch waited 4.1 s at p50 (from intended send to first token), 3.6 s of it in the engine's queue'."""
    if waits.total_p50_ms is None:
        return f"{waits.tier}: no served request"
    words = {"client": "in the client", "gateway": "in the gateway's queue", "engine_queue": "in the engine's queue",
             "prefill": "in prefill", "decode": "in decode (whole answers)", "rest": "on the wire or unexplained"}
    parts = {p.part: p for p in waits.parts}
    main = max((p for p in waits.parts if p.share is not None and p.part != "rest"),
               key=lambda p: p.share or 0.0, default=None)
    out = f"{waits.tier} waited {text.ms(waits.total_p50_ms)} at p50"
    if main is None or main.p50_ms is None:
        return out + " (no server timing reported)"
    out += f", {text.ms(main.p50_ms)} of it {words[main.part]} at p50 ({text.pct(main.share, 0)} of its total wait)"
    queue = parts.get("engine_queue")
    if queue is not None and main.part != "engine_queue" and queue.share is not None:
        out += f"; engine queue {text.pct(queue.share, 0)}"
    rest = parts.get("rest")
    if rest is not None and rest.share is not None and rest.share > (main.share or 0.0):
        out += (f"; {text.pct(rest.share, 0)} is not explained by what the stack reported "
                "(the network, or a part it does not report)")
    return out
