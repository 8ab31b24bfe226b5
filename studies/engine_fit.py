"""The replica model's step-time coefficients fitted to a real engine's probe requests (pure).

The simulator's step model (testbed/presets.py): step_s = base_s + per_seq_s·decode_seqs + per_kv_token_s·kv_tokens
+ prefill_per_token_s·prefill_tokens (+ prefill_step_s for a step holding any prefill). A request's measured time
spans whole steps, so it is the model's terms summed over those steps; each request is one row [steps, Σ decode
seqs, Σ KV tokens, Σ prefill tokens, steps with prefill] → seconds.
The rows come from what the engine and the client recorded (``observations``); the fit is weighted least squares
on relative error, no coefficient below zero, intervals by bootstrap, and its error (per-request MAPE, Pearson r)
is measured on held-out probes only, as BLIS reports a fit. A fit the model cannot carry is refused, not written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

COEFFICIENTS = ("base_s", "per_seq_s", "per_kv_token_s", "prefill_per_token_s", "prefill_step_s")
MAX_MAPE = 0.20  # a held-out request predicted off by more than this on average: the model does not carry it
MIN_HELDOUT = 3  # fewer held-out requests of a kind measure no error
SAME_STEP_NS = 2_000_000  # two first tokens this close came out of one engine step (vLLM emits a step at once)
BOOTSTRAP = 300


class FitError(ValueError):
    """The probes cannot be fitted, or the model cannot carry them (one line, says which; ``fit``: the refused fit)."""

    def __init__(self, message: str, fit: Fit | None = None) -> None:
        super().__init__(message)
        self.fit = fit


@dataclass(frozen=True)
class Observation:
    """One measured stretch of a request: the steps it spans, the model's terms summed over them, its seconds."""

    probe: str  # the probe it belongs to (held-out probes are whole probes)
    kind: str  # "prefill" (scheduled → first token) or "decode" (first → last token)
    steps: float
    decode_seqs: float
    kv_tokens: float
    prefill_tokens: float
    prefill_steps: float  # steps among them that held any prompt chunk
    seconds: float

    def row(self) -> list[float]:
        """The design row, in ``COEFFICIENTS`` order."""
        return [self.steps, self.decode_seqs, self.kv_tokens, self.prefill_tokens, self.prefill_steps]


@dataclass(frozen=True)
class KindError:
    """The fit's error on one kind of held-out request."""

    kind: str
    n: int
    mape: float
    pearson_r: float | None  # None: fewer than 3 requests or no spread to correlate


@dataclass(frozen=True)
class Fit:
    """Fitted coefficients, their 95 % bootstrap intervals and the held-out error."""

    coefficients: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    pinned_zero: tuple[str, ...]  # coefficients the data put below zero, held at zero (the rest refitted)
    train_n: int
    heldout_n: int
    mape: float  # held-out, every request
    pearson_r: float | None
    train_mape: float
    kinds: tuple[KindError, ...] = field(default=())
    # the engine's own repeat noise: requests of one probe and kind timed per step, each against their mean (MAPE);
    # a held-out error near it is noise the model cannot remove, not a misfit (None: no probe repeated)
    noise_mape: float | None = None


# --------------------------------------------------------------------------- the fit


def _solve(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """Least squares on relative error with every coefficient ≥ 0: a negative one is pinned at zero, the rest
    refitted (the most negative first), as an active-set NNLS; returns (coefficients, pinned indices)."""
    xw = x / y[:, None]
    active = list(range(x.shape[1]))
    pinned: list[int] = []
    while active:
        sol, *_ = np.linalg.lstsq(xw[:, active], np.ones(len(y)), rcond=None)
        if (sol >= 0).all():
            out = np.zeros(x.shape[1])
            out[active] = sol
            return out, tuple(sorted(pinned))
        worst = active[int(np.argmin(sol))]
        active.remove(worst)
        pinned.append(worst)
    return np.zeros(x.shape[1]), tuple(range(x.shape[1]))


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 3 or float(np.std(a)) == 0.0 or float(np.std(b)) == 0.0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y)) if len(y) else math.nan


def fit(observations: Sequence[Observation], heldout: Iterable[str], *, max_mape: float = MAX_MAPE,
        bootstrap: int = BOOTSTRAP, seed: int = 0) -> Fit:
    """Fit on the probes not in ``heldout``, measure on those in it; FitError when the model cannot carry them."""
    held = set(heldout)
    rows = [o for o in observations if o.seconds > 0 and math.isfinite(o.seconds)]
    train = [o for o in rows if o.probe not in held]
    test = [o for o in rows if o.probe in held]
    if len(train) < 2 * len(COEFFICIENTS):
        raise FitError(f"{len(train)} training requests measured: too few to fit {len(COEFFICIENTS)} coefficients")
    x = np.array([o.row() for o in train], dtype=float)
    y = np.array([o.seconds for o in train], dtype=float)
    unseen = [name for i, name in enumerate(COEFFICIENTS) if not np.any(x[:, i] > 0)]
    if unseen:
        raise FitError(f"the probes never exercised {', '.join(unseen)}: nothing to fit it from")
    if np.linalg.matrix_rank(x / y[:, None]) < x.shape[1]:
        raise FitError("the probes do not separate the coefficients (collinear design): vary batch and context")
    coef, pinned = _solve(x, y)
    rng = np.random.default_rng(seed)
    draws = np.empty((bootstrap, x.shape[1]))
    for b in range(bootstrap):
        pick = rng.integers(0, len(y), len(y))
        draws[b], _ = _solve(x[pick], y[pick])
    low, high = np.percentile(draws, [2.5, 97.5], axis=0)
    if len({o.kind for o in test}) < len({o.kind for o in train}) or len(test) < MIN_HELDOUT:
        raise FitError(f"{len(test)} held-out requests, not every kind of probe among them: the fit's error "
                       "would be unmeasured")
    xt = np.array([o.row() for o in test], dtype=float)
    yt = np.array([o.seconds for o in test], dtype=float)
    pred = xt @ coef
    kinds = []
    for kind in sorted({o.kind for o in test}):
        mask = np.array([o.kind == kind for o in test])
        kinds.append(KindError(kind, int(mask.sum()), _mape(pred[mask], yt[mask]), _pearson(pred[mask], yt[mask])))
    result = Fit(
        coefficients={name: float(coef[i]) for i, name in enumerate(COEFFICIENTS)},
        intervals={name: (float(low[i]), float(high[i])) for i, name in enumerate(COEFFICIENTS)},
        pinned_zero=tuple(COEFFICIENTS[i] for i in pinned), train_n=len(train), heldout_n=len(test),
        mape=_mape(pred, yt), pearson_r=_pearson(pred, yt), train_mape=_mape(x @ coef, y), kinds=tuple(kinds),
        noise_mape=noise(rows))
    if coef[0] <= 0:
        raise FitError("the replica model does not carry this engine: no time per step is left once the other "
                       "terms are fitted (its steps do not grow as the model's do)", result)
    bad = [k for k in kinds if k.mape > max_mape]
    if bad:
        worst = max(bad, key=lambda k: k.mape)
        raise FitError(f"the replica model does not carry this engine: held-out {worst.kind} requests are "
                       f"predicted {worst.mape:.0%} off on average (limit {max_mape:.0%}; {worst.n} requests)",
                       result)
    return result


def noise(observations: Sequence[Observation]) -> float | None:
    """The repeat noise: each request's time per step against the mean of its probe and kind (MAPE), None without
    repeats."""
    groups: dict[tuple[str, str], list[float]] = {}
    for o in observations:
        if o.seconds > 0 and o.steps > 0:
            groups.setdefault((o.probe, o.kind), []).append(o.seconds / o.steps)
    devs = [abs(v - float(np.mean(vs))) / float(np.mean(vs)) for vs in groups.values() if len(vs) > 1 for v in vs]
    return float(np.mean(devs)) if devs else None


def predict(coefficients: Mapping[str, float], obs: Observation) -> float:
    """The model's seconds for one observation."""
    return sum(coefficients[name] * v for name, v in zip(COEFFICIENTS, obs.row(), strict=True))


# --------------------------------------------------------------------------- rows from recorded requests


@dataclass(frozen=True)
class Measured:
    """What one served request recorded, in the terms the rows need (times: ns from the run's anchor)."""

    probe: str
    prompt_tokens: int
    output_tokens: int
    first_token_ns: int
    last_token_ns: int
    prefill_s: float | None  # the engine's scheduled → first token (vLLM metrics), None = not reported
    itl_s: float | None  # the engine's mean inter-token time, else the client's


def measured(record: Mapping[str, Any], probe: str) -> Measured | None:
    """A served, complete request record as ``Measured``; None for anything else (never guessed)."""
    ok = record.get("status") == 200 and record.get("complete") and not record.get("cancelled")
    first, last = record.get("first_token_ns"), record.get("last_token_ns") or record.get("done_ns")
    prompt, output = record.get("prompt_tokens"), record.get("output_tokens")
    if not ok or not isinstance(first, int) or not isinstance(last, int) or not isinstance(prompt, int) \
            or not isinstance(output, int) or prompt <= 0 or output <= 0:
        return None
    ttft = record.get("metrics_time_to_first_token_ms")
    itl = record.get("metrics_mean_itl_ms")
    if itl is None and isinstance(record.get("itl_mean_ns"), int):
        itl = record["itl_mean_ns"] / 1e6
    return Measured(probe, prompt, output, first, last, None if ttft is None else float(ttft) / 1000,
                    None if itl is None else float(itl) / 1000)


def _kv_at(m: Measured, t_ns: float) -> float:
    """KV tokens request ``m`` holds at ``t_ns`` (its prompt and the tokens made so far, linear between them)."""
    if t_ns < m.first_token_ns or t_ns > m.last_token_ns:
        return 0.0
    span = m.last_token_ns - m.first_token_ns
    done = 1 + (m.output_tokens - 1) * ((t_ns - m.first_token_ns) / span if span > 0 else 1.0)
    return m.prompt_tokens + done


def _clusters(times: list[int]) -> int:
    """How many engine steps these first tokens came out of (those within ``SAME_STEP_NS`` of the previous: one)."""
    ordered = sorted(times)
    return sum(1 for i, t in enumerate(ordered) if i == 0 or t - ordered[i - 1] > SAME_STEP_NS)


def observations(requests: Sequence[Measured], max_num_batched_tokens: int) -> list[Observation]:
    """Each request's prefill and decode as rows, from every request of the same run (pure).

    Other requests in flight are counted by their own client times: a request decoding while this one decodes
    adds its KV and one sequence to each shared step; one whose first token came out inside this one's decode
    added its prompt as prefill to a step of it; first tokens within ``SAME_STEP_NS`` shared the prefill step.
    """
    out: list[Observation] = []
    for m in requests:
        others = [o for o in requests if o is not m]
        if m.prefill_s is not None:
            chunks = max(1, math.ceil(m.prompt_tokens / max_num_batched_tokens))
            kv_own = sum(min(m.prompt_tokens, c * max_num_batched_tokens) for c in range(1, chunks + 1))
            t = float(m.first_token_ns)
            decoding = [o for o in others if o.first_token_ns + SAME_STEP_NS < t <= o.last_token_ns]
            sharing = [o for o in others if abs(o.first_token_ns - t) <= SAME_STEP_NS]
            out.append(Observation(
                m.probe, "prefill", chunks, float(len(decoding)),
                kv_own + sum(_kv_at(o, t) for o in decoding) + sum(o.prompt_tokens for o in sharing),
                float(m.prompt_tokens + sum(o.prompt_tokens for o in sharing)), float(chunks), m.prefill_s))
        steps = m.output_tokens - 1
        if m.itl_s is None or steps < 1 or m.last_token_ns <= m.first_token_ns:
            continue
        lo, hi = m.first_token_ns, m.last_token_ns
        span = hi - lo
        seqs = float(steps)
        kv = steps * (m.prompt_tokens + (m.output_tokens + 1) / 2)
        prefill = 0.0
        prefill_at: list[int] = []
        for o in others:
            a, b = max(lo, o.first_token_ns), min(hi, o.last_token_ns)
            if b > a:
                share = steps * (b - a) / span
                seqs += share
                kv += share * _kv_at(o, (a + b) / 2)
            if lo + SAME_STEP_NS < o.first_token_ns <= hi:
                prefill += o.prompt_tokens
                kv += o.prompt_tokens
                prefill_at.append(o.first_token_ns)
        out.append(Observation(m.probe, "decode", float(steps), seqs, kv, prefill, float(_clusters(prefill_at)),
                               m.itl_s * steps))
    return out
