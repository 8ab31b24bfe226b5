"""Pooled inter-token latency: every gap between consecutive stream events of every served request, per tier.

Per-request TPOT ((last token − first token) / (tokens − 1)) gives each request one figure, however long it is;
pooled ITL gives every gap one figure, so a stall inside a long answer counts as often as it happened (the
figure vLLM's and AIPerf's benchmarks report as ITL). It needs each token's arrival time, which the records
hold only when the scenario asked (``record_token_times: true``: the request record's ``token_ns``); otherwise
there is nothing to pool, and the audit says so (None), never an estimate from TPOT. The times are the client's:
events the event loop read in one go share one time (a gap of 0), as the client saw them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rushhour.records.reader import iter_run
from rushhour.records.schema import KIND_REQUEST

NS_PER_MS = 1e6
MAX_TOKENS = 200_000  # a record's times read at most (a hostile file's list is bounded)


def gaps_ms(times: Any) -> np.ndarray | None:
    """The gaps (ms) between consecutive times of one record's ``token_ns``; None when it is not a list of
    increasing integers (a hostile or broken line is left out, not guessed at)."""
    if not isinstance(times, list) or len(times) < 2:
        return None
    head = times[:MAX_TOKENS]
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in head):
        return None
    gaps = np.diff(np.asarray(head, dtype=np.float64))
    if (gaps < 0).any():
        return None
    return gaps / NS_PER_MS


def pooled_gaps(run_dir: Path, served: dict[str, str]) -> dict[str, np.ndarray]:
    """Per tier, every inter-token gap (ms) of the served attempts ``served`` names (request_id → tier)."""
    parts: dict[str, list[np.ndarray]] = {}
    for line in iter_run(run_dir, KIND_REQUEST):
        tier = served.get(str(line.get("request_id")))
        if tier is None:
            continue
        gaps = gaps_ms(line.get("token_ns"))
        if gaps is not None and len(gaps):
            parts.setdefault(tier, []).append(gaps)
    return {tier: np.concatenate(arrays) for tier, arrays in parts.items()}
