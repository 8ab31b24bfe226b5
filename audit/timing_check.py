"""Per-request server times summed over the run against the server's own histograms (vLLM's ``_sum``/``_count``).

vLLM observes ``vllm:request_queue_time_seconds`` and ``vllm:request_prefill_time_seconds`` from the same
timestamps as the per-request ``metrics`` object (queued → scheduled, scheduled → first token), so over a run
the client's sum equals the histogram's ``_sum`` delta and the counts agree; a gap is a named error finding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit import text
from rushhour.audit.crosscheck import counter_increase, counter_series
from rushhour.audit.metrics import ServerMetrics
from rushhour.audit.summary import Finding, TimingCheck
from rushhour.stacks.profile import CounterCheck
from rushhour.stacks.timing import HISTOGRAMS

TOLERANCE = 0.01  # 1 % of the server's sum


def _delta(metrics: ServerMetrics, name: str) -> float | None:
    found = counter_series(metrics, CounterCheck(client="", metric=name))
    if found is None:
        return None
    increase, _, _ = counter_increase(found[1], metrics.scrape_ts_ns)
    return float(increase.sum())


def _unreported(attempts: pd.DataFrame, values: np.ndarray) -> int:
    """Attempts the server may have timed that brought no timing back: sent, no value, and either a 200 that did
    not end with one (cut, cancelled, unfinished), no answer at all, or a kill after admission (``preempted``:
    llm-d's revocation answers a running request 429 evicted, and vLLM times every scheduled request it ends)."""
    status = pd.to_numeric(attempts.get("status", pd.Series(0, index=attempts.index)), errors="coerce").fillna(0)
    not_sent = attempts["not_sent"].fillna(False).to_numpy(dtype=bool) if "not_sent" in attempts.columns else False
    killed = (attempts["cls"].astype(object) == "preempted").to_numpy(dtype=bool) if "cls" in attempts.columns \
        else np.zeros(len(attempts), dtype=bool)
    maybe = np.isnan(values) & (np.isin(status.to_numpy(), (0, 200)) | killed) & ~not_sent
    return int(maybe.sum())


def check_timing(attempts: pd.DataFrame, metrics: ServerMetrics) -> tuple[list[TimingCheck], list[Finding]]:
    """One check per histogram scraped and per-request field reported; findings for the ones that disagree."""
    checks: list[TimingCheck] = []
    findings: list[Finding] = []
    if metrics.empty:
        return checks, findings
    for histogram, field in HISTOGRAMS:
        if field not in attempts.columns:
            continue
        values = pd.to_numeric(attempts[field], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        reported = values[~np.isnan(values)]
        server_sum, server_count = _delta(metrics, histogram + "_sum"), _delta(metrics, histogram + "_count")
        if not len(reported) or server_sum is None or server_count is None:
            continue
        client_sum = float(reported.sum()) / 1000.0
        open_ = _unreported(attempts, values)
        extra = round(server_count) - len(reported)
        slack = TOLERANCE * max(server_sum, 1e-3)
        if extra == 0:  # every request the server timed reported its time: the sums are equal
            matches = abs(client_sum - server_sum) <= slack
        else:  # requests the server timed without an answer that said so (cut, cancelled, unfinished)
            matches = 0 < extra <= open_ and client_sum <= server_sum + slack
        checks.append(TimingCheck(metric=histogram, record_field=field, client_count=len(reported),
                                  server_count=server_count, client_sum_s=client_sum, server_sum_s=server_sum,
                                  unreported=open_, matches=matches))
        if not matches:
            findings.append(Finding(
                kind="timing_mismatch", severity="error", tier=None,
                message=f"{field} summed over the run ({len(reported)} requests, {text.ms(client_sum * 1000)}) "
                        f"differs from the server's {histogram} ({text.whole(server_count)} requests, "
                        f"{text.ms(server_sum * 1000)}): the per-request timing and the server's totals disagree",
                data={"metric": histogram, "field": field, "client_sum_s": client_sum, "server_sum_s": server_sum,
                      "client_count": len(reported), "server_count": server_count}))
    return checks, findings
