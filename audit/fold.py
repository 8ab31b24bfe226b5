"""Derive per-attempt latencies and fold attempts (retries, fallbacks) into logical requests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rushhour.audit.summary import POLICY_DROP_CLASSES, UNSERVED_CLASSES

NS_PER_MS = 1e6
NS_PER_S = 1e9
CALIBRATION_PERSONA = "calibration"

# What a logical request carries from its deciding attempt (the summary reads nothing else).
LOGICAL_COLUMNS = (
    "logical_code", "logical_id", "request_id", "tier", "tenant", "persona", "task_id", "route", "cls", "served",
    "unserved", "policy_drop", "status", "sent_ns", "intended_ns", "first_token_ns", "done_ns", "t_end_ns", "ttft_ns",
    "e2e_ns", "tpot_ns", "itl_max_ns", "prompt_size", "attempt",
)

# The only class outside the denominator of rates: never sent (the generator's fault, judged by validity).
# ``unfinished`` and ``cancelled`` stay in: a request the run cut is a request not served.
UNJUDGED = ("not_sent",)
# Attempts the generator ended (stopped in flight, or never sent): they lose to an attempt with a real
# outcome when choosing which attempt decides a retried request, so a drop before them stays visible.
GENERATOR_ENDED = ("unfinished", "not_sent")


def eq(series: pd.Series, value: object) -> np.ndarray:
    """``series == value`` as a bool array, through category codes when categorical (no object copies)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.cat.categories
        if value not in cats:
            return np.zeros(len(series), dtype=bool)
        return series.cat.codes.to_numpy() == cats.get_loc(value)
    return (series == value).to_numpy(dtype=bool)


def isin(series: pd.Series, values: tuple[str, ...] | list[str]) -> np.ndarray:
    """``series.isin(values)`` as a bool array, through category codes when categorical."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = series.cat.categories
        wanted = np.flatnonzero(np.isin(np.asarray(cats, dtype=object), list(values)))
        return np.isin(series.cat.codes.to_numpy(), wanted)
    return series.isin(values).to_numpy(dtype=bool)


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    if name in df.columns:
        return df[name].astype("float64")
    return pd.Series(np.nan, index=df.index)


def prepare_attempts(df: pd.DataFrame, classes: pd.Series, *, inplace: bool = False) -> pd.DataFrame:
    """Add the class and derived times (ns) to each attempt; the frame stays one row per attempt.

    ``inplace`` adds the columns to ``df`` itself (the loader's frame: a million rows are not copied).
    """
    out = df if inplace else df.copy()
    out["cls"] = classes
    sent = _col(out, "sent_ns")
    intended = _col(out, "intended_ns").fillna(sent)
    first = _col(out, "first_token_ns")
    last = _col(out, "last_token_ns")
    done = _col(out, "done_ns")
    out["intended_ns"] = intended
    # When the outcome became known: the end of the attempt, or the last thing we saw of it.
    out["t_end_ns"] = done.fillna(_col(out, "headers_ns")).fillna(sent).fillna(intended)
    out["ttft_ns"] = first - sent
    out["e2e_ns"] = done - sent
    out["schedule_lag_ns"] = sent - intended
    tokens = _col(out, "output_tokens").fillna(_col(out, "tokens"))
    out["tpot_ns"] = ((last - first) / (tokens - 1)).where(tokens > 1)
    out["prompt_size"] = _col(out, "prompt_tokens").fillna(_col(out, "prompt_bytes") / 4.0)
    if "logical_code" not in out.columns:  # frames not built by audit.load (tests, tools)
        lid = out["logical_id"] if "logical_id" in out.columns else out["request_id"]
        lid = lid.astype(object).where(lid.notna() & (lid.astype(object) != ""), out["request_id"].astype(object))
        out["logical_id"] = lid
        out["logical_code"] = pd.factorize(lid)[0]
    if "attempt" not in out.columns:
        out["attempt"] = 1.0
    out["unserved"] = isin(out["cls"], UNSERVED_CLASSES)
    out["policy_drop"] = isin(out["cls"], POLICY_DROP_CLASSES)
    out["served"] = eq(out["cls"], "served")
    return out


def fold_logical(attempts: pd.DataFrame) -> pd.DataFrame:
    """One row per logical request: served if any attempt served, else the last attempt's class.

    The last attempt that was sent and reached an outcome decides over a later unfinished or
    not_sent one (only when every attempt is unfinished/not_sent does the last of those decide).
    The row carries the deciding attempt's facts (the serving attempt, else the deciding one), the
    number of attempts, and ``ttft_intended_ns``: first token minus the *first* attempt's intended
    send time, i.e. the wait a user saw including every retry (coordinated-omission corrected).
    """
    if len(attempts) == 0:
        out = attempts.copy()
        out["attempts"] = pd.Series(dtype="int64")
        out["ttft_intended_ns"] = pd.Series(dtype="float64")
        out["first_intended_ns"] = pd.Series(dtype="float64")
        return out
    codes = attempts["logical_code"].to_numpy(dtype=np.int64)
    n_groups = int(codes.max()) + 1
    counts = np.bincount(codes, minlength=n_groups)
    intended = attempts["intended_ns"].to_numpy(dtype=np.float64)
    intended = np.where(np.isfinite(intended), intended, np.inf)
    # Most logical requests have one attempt: only the retried ones need choosing (or a minimum).
    multi = counts[codes] > 1
    single = np.flatnonzero(~multi)
    rows = np.flatnonzero(multi)
    first_intended = np.full(n_groups, np.inf)
    first_intended[codes[single]] = intended[single]
    np.minimum.at(first_intended, codes[rows], intended[rows])
    first_intended[np.isinf(first_intended)] = np.nan
    if len(rows):
        # Deciding attempt: served beats not served; then one that was sent and reached an outcome beats a
        # unfinished or not_sent one (a retry the generator did not send must not hide the drop before it);
        # then the highest attempt number, then the latest seq.
        seq = attempts["seq"].to_numpy(dtype=np.float64) if "seq" in attempts.columns else np.zeros(len(codes))
        had_outcome = ~isin(attempts["cls"], GENERATOR_ENDED)
        order = rows[np.lexsort((
            np.nan_to_num(seq[rows]),
            np.nan_to_num(attempts["attempt"].to_numpy(dtype=np.float64)[rows], nan=1.0),
            had_outcome[rows],
            attempts["served"].to_numpy()[rows],
            codes[rows],
        ))]
        sorted_codes = codes[order]
        last_of_group = np.ones(len(order), dtype=bool)
        last_of_group[:-1] = sorted_codes[1:] != sorted_codes[:-1]
        pick = np.zeros(len(codes), dtype=bool)  # in row order without a sort (~1 s of a 10M-row sort)
        pick[single] = True
        pick[order[last_of_group]] = True
        chosen = np.flatnonzero(pick)
    else:
        chosen = single
    columns = [c for c in LOGICAL_COLUMNS if c in attempts.columns]
    logical = attempts[columns].take(chosen)
    group = codes[chosen]
    logical["attempts"] = counts[group]
    logical["first_intended_ns"] = first_intended[group]
    logical["ttft_intended_ns"] = logical["first_token_ns"].astype("float64") - logical["first_intended_ns"]
    logical.index = pd.RangeIndex(len(logical))
    return logical


def judged(frame: pd.DataFrame) -> pd.Series:
    """Rows that count in rates: every request that was sent (all but ``not_sent``)."""
    return pd.Series(~isin(frame["cls"], UNJUDGED), index=frame.index)
