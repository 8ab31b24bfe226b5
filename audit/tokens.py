"""Token fidelity per tier: the server's prompt counts against the intended ones, output served against asked."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit.fold import eq
from rushhour.audit.summary import TokenFidelity


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame.columns:
        return frame[name]
    return pd.Series([None] * len(frame), index=frame.index, dtype="object")


def token_fidelity(attempts: pd.DataFrame) -> TokenFidelity | None:
    """The tier's token fidelity from its attempts (None when no served attempt says anything about tokens)."""
    # the served rows of the few columns read (a filter of the whole tier frame would copy every column)
    columns = [c for c in ("prompt_tokens", "prompt_tokens_intended", "prompt_tokens_exact", "output_tokens",
                           "max_tokens", "output_pinned") if c in attempts.columns]
    served = (attempts.loc[eq(attempts["cls"], "served"), columns] if "cls" in attempts.columns
              else attempts[columns].iloc[0:0])
    reported = pd.to_numeric(_col(served, "prompt_tokens"), errors="coerce")
    intended = pd.to_numeric(_col(served, "prompt_tokens_intended"), errors="coerce")
    both = reported.notna() & intended.notna()
    diff = (reported[both] - intended[both]).to_numpy(dtype=np.float64)
    exact_basis = _col(served, "prompt_tokens_exact")[both].fillna(False).astype(bool)
    out = pd.to_numeric(_col(served, "output_tokens"), errors="coerce")
    asked = pd.to_numeric(_col(served, "max_tokens"), errors="coerce")
    has_out = out.notna() & asked.notna() & (asked > 0)
    ratio = (out[has_out] / asked[has_out]).to_numpy(dtype=np.float64)
    pinned = _col(served, "output_pinned")[has_out].fillna(False).astype(bool)
    if not len(diff) and not len(ratio):
        return None
    return TokenFidelity(
        prompt_n=len(diff),
        prompt_exact_basis=bool(len(diff)) and bool(exact_basis.all()),
        prompt_diff_median=float(np.median(diff)) if len(diff) else None,
        prompt_diff_p99=float(np.quantile(np.abs(diff), 0.99)) if len(diff) else None,
        prompt_share_exact=float((diff == 0).mean()) if len(diff) else None,
        output_n=len(ratio),
        output_pinned_share=float(pinned.mean()) if len(ratio) else None,
        output_share_equal=float((ratio == 1.0).mean()) if len(ratio) else None,
        output_ratio_median=float(np.median(ratio)) if len(ratio) else None,
    )
