"""Classify request attempts into the outcome taxonomy, per stack profile, from raw facts only.

Status codes alone lie (DESIGN.md): llm-d v0.10 answers a queue TTL with 429 where GAIE v1 answered
503, SGLang sends its 503 inside a 200 stream. So each profile has an ordered table of rules over
(status, a text "haystack" = reason + error + in-band error, whether a first token arrived); the
first rule that matches wins. Rules run once per *distinct* combination of those facts (a run has
a few dozen), then map back to every row, so a million attempts classify in milliseconds.

Precedence for one attempt (docs/audit.md; fail closed: what no rule knows is ``unclassified``):
1. ``not_sent`` → not_sent (the generator's own fault); ``abandoned`` (the client's flag: its user's
   patience ran out before a first token and it closed the connection) → abandoned.
2. an in-band error (inside a 200 stream) → the profile's rules on that text, else ``unclassified``:
   an in-band error is never ``served``.
3. an HTTP error status (≥ 300) → the profile's rules, else the profile's status default, else the
   common status default (``COMMON_STATUS_DEFAULTS``: plain client/server errors → failed), else
   ``unclassified`` (e.g. a 503 whose text no rule of the profile knows).
4. a 2xx: ``complete`` → served; else client timeout → timeout; generator stopped → unfinished;
   otherwise failed (a stream cut before its end marker).
5. no response (status 0): client timeout → timeout; generator stopped → unfinished; else transport.

The record's ``cancelled`` flag is the generator stopping (run end, Ctrl-C, budget) while the attempt
was in flight: class ``unfinished``. Class ``cancelled`` is only a cancel the server reports (499,
llm-d's rejected-context-cancelled); a user who gives up is its own class, ``abandoned``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from rushhour import stacks
from rushhour.audit.summary import OUTCOME_CLASSES
from rushhour.stacks import Rule
from rushhour.stacks.common import COMMON_STATUS_DEFAULTS as COMMON_STATUS_DEFAULTS_TABLE

DEFAULT_PROFILE = stacks.DEFAULT

FACT_COLUMNS = ("status", "reason", "error", "in_band_error", "complete", "cancelled", "not_sent",
                "client_timeout", "transport_error", "first_token_ns", "abandoned")

# The rule tables live with their stacks (stacks/<name>.py); these are read-only views of the registry.
PROFILE_ALIASES: dict[str, str] = {alias: p.name for p in stacks.STACKS for alias, _ in p.aliases}
PROFILE_RULES: dict[str, list[Rule]] = {p.name: list(p.rules) for p in stacks.STACKS}

# When no rule matched an error status: what that status means on this profile.
STATUS_DEFAULTS: dict[str, dict[int, str]] = {p.name: dict(p.status_defaults) for p in stacks.STACKS}

# Every profile, after its own rules and defaults (TAXONOMY.md; the table lives in stacks/common.py):
# a bad request, a crash, a bad gateway → failed; 429/503/529/408 without a rule → unclassified.
COMMON_STATUS_DEFAULTS: dict[int, str] = dict(COMMON_STATUS_DEFAULTS_TABLE)


def _check_classes() -> None:
    """Every class a profile can produce is one of the audit's classes (fail at import, not mid-audit)."""
    for profile in stacks.STACKS:
        produced = ([r.cls for r in profile.rules] + list(profile.status_defaults.values())
                    + list(COMMON_STATUS_DEFAULTS.values()))
        unknown = sorted(set(produced) - set(OUTCOME_CLASSES))
        if unknown:
            raise ValueError(f"stack profile {profile.name!r} produces unknown classes {unknown}")


_check_classes()


def normalise_profile(profile: str | None) -> str:
    """The rule table a profile uses (testbed, fifo and headroom speak llm-d; unknown names → llm-d)."""
    try:
        return stacks.canonical(profile)
    except KeyError:
        return DEFAULT_PROFILE


def classify_one(
    profile: str | None,
    *,
    status: int = 0,
    reason: str | None = None,
    error: str | None = None,
    in_band_error: str | None = None,
    complete: bool = False,
    cancelled: bool = False,
    not_sent: bool = False,
    client_timeout: bool = False,
    transport_error: bool = False,
    first_token: bool = False,
    abandoned: bool = False,
) -> str:
    """The class of one attempt (the reference the vectorised path is tested against)."""
    name = normalise_profile(profile)
    if not_sent:
        return "not_sent"
    if abandoned:  # the user gave up before a first token and closed the connection: whatever came before
        return "abandoned"
    if in_band_error:
        haystack = " | ".join(t for t in (reason, error, in_band_error) if t)
        return _match(name, haystack, status, first_token) or "unclassified"
    if status >= 300:
        haystack = " | ".join(t for t in (reason, error) if t)
        found = _match(name, haystack, status, first_token)
        return (found or STATUS_DEFAULTS.get(name, {}).get(status) or COMMON_STATUS_DEFAULTS.get(status)
                or "unclassified")
    if 200 <= status < 300:
        if complete:
            return "served"
        if client_timeout:
            return "timeout"
        if cancelled:
            return "unfinished"
        return "failed"
    if client_timeout:
        return "timeout"
    if cancelled:
        return "unfinished"
    return "transport"


def classify_record(profile: str | None, record: Mapping[str, Any]) -> str:
    """The class of one raw request line (the early-abort watcher reads lines before any frame exists)."""
    status = record.get("status")
    return classify_one(
        profile,
        status=status if isinstance(status, int) else 0,
        reason=record.get("reason") or None, error=record.get("error") or None,
        in_band_error=record.get("in_band_error") or None, complete=bool(record.get("complete")),
        cancelled=bool(record.get("cancelled")), not_sent=bool(record.get("not_sent")),
        client_timeout=bool(record.get("client_timeout")), transport_error=bool(record.get("transport_error")),
        first_token=record.get("first_token_ns") is not None, abandoned=bool(record.get("abandoned")),
    )


def named_cause(
    profile: str | None,
    *,
    status: int = 0,
    reason: str | None = None,
    error: str | None = None,
    in_band_error: str | None = None,
    first_token: bool = False,
) -> str | None:
    """The one-line cause and fix (``Rule.finding``) of the rule that classed this error answer, if it names one."""
    if not in_band_error and status < 300:
        return None
    haystack = " | ".join(t for t in (reason, error, in_band_error) if t)
    rule = stacks.get(normalise_profile(profile)).rule_for(haystack, status, first_token)
    return (rule.finding or None) if rule is not None else None


def _match(profile: str, haystack: str, status: int, first_token: bool) -> str | None:
    return stacks.get(profile).classify(haystack, status, first_token)


def _codes(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(integer code per row, the distinct values); missing text becomes ''."""
    series = pd.Series(values)
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = np.asarray(series.cat.categories.astype(str), dtype=object)
        codes = series.cat.codes.to_numpy().astype(np.int64)
        return np.where(codes < 0, len(cats), codes), np.append(cats, "")
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    uniq = np.asarray(uniques, dtype=object)
    return np.where(codes < 0, len(uniq), codes).astype(np.int64), np.append(uniq, "" if uniq.dtype == object else 0)


def classify_frame(df: pd.DataFrame, profile: str | pd.Series | None = None) -> pd.Series:
    """Class of every attempt of ``df`` (request records); ``profile`` may be one name or one per row."""
    n = len(df)
    if n == 0:
        return pd.Series(pd.Categorical([], categories=OUTCOME_CLASSES), index=df.index)

    def col(name: str, default: object) -> pd.Series:
        return df[name] if name in df.columns else pd.Series([default] * n, index=df.index)

    if isinstance(profile, pd.Series):  # a categorical one is read through its codes (no text per row)
        profiles = profile if isinstance(profile.dtype, pd.CategoricalDtype) else profile.astype(str).to_numpy()
    else:
        one = pd.Index([normalise_profile(profile)])
        profiles = pd.Series(pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), one))
    columns = [
        _codes(profiles),
        _codes(col("status", 0).fillna(0).astype(np.int64).to_numpy()),
        _codes(col("reason", None)),
        _codes(col("error", None)),
        _codes(col("in_band_error", None)),
    ]
    flags = ("complete", "cancelled", "not_sent", "client_timeout", "transport_error", "abandoned")
    bits = np.zeros(n, dtype=np.int64)
    for i, name in enumerate(flags):
        bits |= col(name, False).astype(bool).to_numpy().astype(np.int64) << i
    bits |= col("first_token_ns", np.nan).notna().to_numpy().astype(np.int64) << len(flags)
    # One integer per distinct combination of facts (mixed radix); a run has a few dozen of them.
    key = bits
    radix = 1 << (len(flags) + 1)
    for codes, uniques in columns:
        key = key + codes * radix
        radix *= len(uniques) + 1
    if radix >= 2**62:  # absurdly many distinct texts: fall back to sorting rows of codes
        stacked = np.stack([c for c, _ in columns] + [bits], axis=1)
        _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    else:
        inverse, uniques = pd.factorize(key)
        first = np.full(len(uniques), -1, dtype=np.int64)
        first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # first row of each combination
    classes = []
    for row in first:
        profile_v, status_v, reason_v, error_v, band_v = (u[c[row]] for c, u in columns)
        b = int(bits[row])
        classes.append(_classify_key((profile_v, status_v, reason_v, error_v, band_v,
                                      *(bool(b >> i & 1) for i in range(len(flags) + 1)))))
    # each row's class by its combination's code: no text per row
    class_codes = np.array([OUTCOME_CLASSES.index(c) for c in classes], dtype=np.int8)
    mapped = class_codes[np.asarray(inverse).reshape(-1)]
    return pd.Series(pd.Categorical.from_codes(mapped, categories=pd.Index(OUTCOME_CLASSES)), index=df.index)


def _classify_key(key: tuple[object, ...]) -> str:
    (profile, status, reason, error, in_band, complete, cancelled, not_sent, timeout, transport, abandoned,
     first_token) = key
    return classify_one(
        str(profile), status=int(str(status)),
        reason=str(reason) or None, error=str(error) or None, in_band_error=str(in_band) or None,
        complete=bool(complete), cancelled=bool(cancelled), not_sent=bool(not_sent),
        client_timeout=bool(timeout), transport_error=bool(transport), first_token=bool(first_token),
        abandoned=bool(abandoned),
    )


def rules_table() -> list[dict[str, object]]:
    """Every rule, in order, for docs and the report's appendix."""
    rows: list[dict[str, object]] = []
    for profile, rules in PROFILE_RULES.items():
        for order, rule in enumerate(rules, 1):
            rows.append({"profile": profile, "order": order, "class": rule.cls, "pattern": rule.pattern,
                         "statuses": rule.statuses, "first_token": rule.first_token, "note": rule.note})
        for status, cls in STATUS_DEFAULTS.get(profile, {}).items():
            rows.append({"profile": profile, "order": None, "class": cls, "pattern": None,
                         "statuses": (status,), "first_token": None, "note": "status default"})
    for status, cls in COMMON_STATUS_DEFAULTS.items():
        rows.append({"profile": "*", "order": None, "class": cls, "pattern": None, "statuses": (status,),
                     "first_token": None, "note": "common status default (every profile)"})
    return rows


