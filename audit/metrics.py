"""Server metrics scraped during the run (``metrics.jsonl``): series, saturation signals, counters."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from rushhour import stacks
from rushhour.audit.fold import NS_PER_S
from rushhour.audit.timeline import Grid
from rushhour.stacks.timing import HISTOGRAMS

METRICS_FILE = "metrics.jsonl"

QUEUE_SIZE = ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")
POOL_SATURATION = ("llm_d_epp_flow_control_pool_saturation", "inference_extension_flow_control_pool_saturation")
WAITING = ("vllm:num_requests_waiting",)
RUNNING = ("vllm:num_requests_running",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
# the counters every stack profile's cross-check reads (stacks/<name>.py ``Metrics.checks``)
CHECKED = tuple(sorted({name for p in stacks.STACKS for c in p.metrics.checks for name in c.names}))
# the histograms the per-request server timing is checked against (stacks/timing.py), as _sum and _count
TIMED = tuple(f"{name}_{part}" for name, _ in HISTOGRAMS for part in ("sum", "count"))
# the per-tenant series whose label a router caps (stacks/<name>.py ``Metrics.fairness_families``)
FAIRNESS = tuple(sorted({name for p in stacks.STACKS for name in p.metrics.fairness_families}))
WANTED = frozenset(QUEUE_SIZE + POOL_SATURATION + WAITING + RUNNING + KV_USAGE + PREEMPTIONS + CHECKED + TIMED)
MAX_TENANT_LABEL_SETS = 100_000  # llm-d's cap (1,001 fairness ids) times its priorities and outcomes fits
SUSTAINED_SCRAPES = 2  # waiting > 0 in this many consecutive scrapes = sustained queueing


@dataclass
class ServerMetrics:
    """Wanted samples as a long frame: ts_ns (from the run anchor), name, priority, outcome, stage,
    labels (every label, as sorted JSON), value."""

    samples: pd.DataFrame
    scrapes: int = 0
    errors: int = 0
    scrape_ts_ns: np.ndarray = field(default_factory=lambda: np.array([]))
    # the label sets (sorted JSON) seen on the per-tenant families, kept as a set, not as rows: a router with a
    # thousand tenants would otherwise add a thousand rows per family and scrape
    tenant_label_sets: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return len(self.samples) == 0


PRE_RUN_NS = 60 * NS_PER_S  # a scrape may precede the anchor (a baseline) or outlast the records by this much
# ``clock`` marker a scrape line may carry (loadgen/scrape.py writes none: its ts_ns is anchor-relative)
CLOCK_MARKERS = {"anchor": "anchor", "relative": "anchor", "monotonic": "monotonic", "mono": "monotonic",
                 "raw": "monotonic", "wall": "wall"}


def _clock(ts: np.ndarray, mono_anchor_ns: int | None, wall_anchor_ns: int | None,
           horizon_ns: float | None = None) -> str:
    """Which clock unmarked scrape times are on: ``anchor`` (relative), ``monotonic`` (raw) or ``wall``.

    Raw CLOCK_MONOTONIC values are never below ``mono_anchor_ns`` − 60 s; anchor-relative ones (what
    loadgen/scrape.py writes) lie within −60 s … the run's end (``horizon_ns``) + 60 s. When both
    readings fit (a machine booted shortly before the run), the writer's anchor-relative shape wins.
    """
    if len(ts) == 0:
        return "anchor"
    median, low, high = float(np.median(ts)), float(ts.min()), float(ts.max())
    if wall_anchor_ns and median > 1e18:
        return "wall"
    if not mono_anchor_ns:
        return "anchor"
    raw_fits = low >= mono_anchor_ns - PRE_RUN_NS
    rel_fits = low >= -PRE_RUN_NS
    if horizon_ns is not None:
        raw_fits = raw_fits and high - mono_anchor_ns <= horizon_ns + PRE_RUN_NS
        rel_fits = rel_fits and high <= horizon_ns + PRE_RUN_NS
        if raw_fits != rel_fits:
            return "monotonic" if raw_fits else "anchor"
        if raw_fits:
            return "anchor"
    return "monotonic" if median >= mono_anchor_ns - PRE_RUN_NS else "anchor"


def _rebase(ts: np.ndarray, mono_anchor_ns: int | None, wall_anchor_ns: int | None,
            horizon_ns: float | None = None, clocks: np.ndarray | None = None) -> np.ndarray:
    """Scrape times may be anchor-relative, raw CLOCK_MONOTONIC or wall-clock ns; bring them to the anchor.

    ``clocks``: per value, the clock its line declared (``""`` = unmarked, decided by ``_clock``).
    """
    if len(ts) == 0:
        return ts
    if clocks is None:
        clocks = np.full(len(ts), "", dtype=object)
    unmarked = clocks == ""
    guess = _clock(ts[unmarked], mono_anchor_ns, wall_anchor_ns, horizon_ns)
    clocks = np.where(unmarked, guess, clocks)
    offset = np.zeros(len(ts))
    offset[clocks == "monotonic"] = float(mono_anchor_ns or 0)
    offset[clocks == "wall"] = float(wall_anchor_ns or 0)
    return ts - offset


def load_metrics(run_dir: Path, mono_anchor_ns: int | None, wall_anchor_ns: int | None = None,
                 horizon_ns: float | None = None) -> ServerMetrics:
    """Read ``metrics.jsonl`` (one scrape a line); bad lines and error scrapes are counted, not fatal.

    ``horizon_ns``: the run's end from the anchor, which helps tell raw monotonic scrape times from
    anchor-relative ones (see ``_clock``); a line's ``clock`` marker, when present, decides for it.
    """
    path = Path(run_dir) / METRICS_FILE
    columns = ["ts_ns", "name", "priority", "outcome", "stage", "labels", "value"]
    if not path.exists():
        return ServerMetrics(pd.DataFrame(columns=columns))
    rows: list[tuple[float, str, str | None, str | None, str | None, str, float]] = []
    row_clock: list[str] = []
    scrape_ts: list[float] = []
    scrape_clock: list[str] = []
    scrapes = errors = 0
    tenant_sets: set[str] = set()
    # Scrapes are few (one per second or so): a plain loop, keeping only the families the audit reads.
    for line in path.read_bytes().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            errors += 1
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("ts_ns"), int | float):
            errors += 1
            continue
        if obj.get("error") or not isinstance(obj.get("samples"), list):
            errors += 1
            continue
        scrapes += 1
        ts = float(obj["ts_ns"])
        clock = CLOCK_MARKERS.get(str(obj.get("clock", "")).lower(), "")
        scrape_ts.append(ts)
        scrape_clock.append(clock)
        for sample in obj["samples"]:
            if not isinstance(sample, dict):
                continue
            if sample.get("name") in FAIRNESS and isinstance(sample.get("labels"), dict):
                if len(tenant_sets) < MAX_TENANT_LABEL_SETS:  # a hostile server's million labels stop here
                        tenant_sets.add(json.dumps(sample["labels"], sort_keys=True, separators=(",", ":")))
                continue
            if sample.get("name") not in WANTED:
                continue
            labels = sample.get("labels") or {}
            try:
                value = float(sample.get("value"))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
            key = json.dumps(labels, sort_keys=True, separators=(",", ":"))
            rows.append((ts, sample["name"], labels.get("priority"), labels.get("outcome"),
                         labels.get("stage"), key, value))
            row_clock.append(clock)
    frame = pd.DataFrame(rows, columns=columns)
    raw = np.asarray(scrape_ts, dtype=np.float64)
    marks = np.asarray(scrape_clock, dtype=object)
    # one decision for the file's unmarked lines, taken on every scrape time (not on the sampled rows)
    guess = _clock(raw[marks == ""], mono_anchor_ns, wall_anchor_ns, horizon_ns)
    stamps = _rebase(raw, mono_anchor_ns, wall_anchor_ns, clocks=np.where(marks == "", guess, marks))
    if len(frame):
        row_marks = np.asarray(row_clock, dtype=object)
        frame["ts_ns"] = _rebase(frame["ts_ns"].to_numpy(dtype=np.float64), mono_anchor_ns, wall_anchor_ns,
                                 clocks=np.where(row_marks == "", guess, row_marks))
    return ServerMetrics(frame, scrapes, errors, np.sort(stamps), frozenset(tenant_sets))


def _family(samples: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    for name in names:
        part = samples[samples["name"] == name]
        if len(part):
            return part
    return samples.iloc[0:0]


def _gauge_by(part: pd.DataFrame, label: str | None, how: str) -> pd.DataFrame:
    """Per scrape, the family aggregated over every label but ``label`` → columns ts_ns, key, value."""
    key = part[label].fillna("all").astype(str) if label else pd.Series("all", index=part.index)
    frame = pd.DataFrame({"ts_ns": part["ts_ns"], "key": key, "value": part["value"]})
    grouped = frame.groupby(["ts_ns", "key"])["value"]
    agg = grouped.sum() if how == "sum" else grouped.mean() if how == "mean" else grouped.max()
    return agg.reset_index()


def _bucket_mean(per_scrape: pd.DataFrame, grid: Grid) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    idx = grid.index(per_scrape["ts_ns"].to_numpy())
    frame = per_scrape.assign(b=idx)
    frame = frame[frame["b"] >= 0]
    for key, part in frame.groupby("key"):
        means = part.groupby("b")["value"].mean()
        series: list[float | None] = [None] * grid.count
        for b, v in means.items():
            series[int(b)] = float(v)  # type: ignore[call-overload]
        out[str(key)] = series
    return out


def _bucket_increase(per_scrape: pd.DataFrame, grid: Grid) -> dict[str, list[float | None]]:
    """Counter increase per bucket (resets treated as restarts from zero)."""
    out: dict[str, list[float | None]] = {}
    for key, part in per_scrape.groupby("key"):
        part = part.sort_values("ts_ns")
        values = part["value"].to_numpy()
        inc = np.diff(values, prepend=values[0])
        inc = np.where(inc < 0, values, inc)
        idx = grid.index(part["ts_ns"].to_numpy())
        ok = idx >= 0
        sums = np.bincount(idx[ok], weights=inc[ok], minlength=grid.count)[: grid.count]
        out[str(key)] = [float(v) for v in sums]
    return out


def server_series(metrics: ServerMetrics, grid: Grid) -> dict[str, dict[str, list[float | None]]]:
    """``timeline.server``: queue size per priority, waiting/running, KV usage, preemptions, saturation."""
    if metrics.empty:
        return {}
    s = metrics.samples
    out: dict[str, dict[str, list[float | None]]] = {}
    specs: list[tuple[str, tuple[str, ...], str | None, str, bool]] = [
        ("queue_size", QUEUE_SIZE, "priority", "sum", False),
        ("pool_saturation", POOL_SATURATION, "stage", "max", False),
        ("num_requests_waiting", WAITING, None, "sum", False),
        ("num_requests_running", RUNNING, None, "sum", False),
        ("kv_cache_usage", KV_USAGE, None, "mean", False),
        ("preemptions", PREEMPTIONS, None, "sum", True),
    ]
    for label, names, by, how, counter in specs:
        part = _family(s, names)
        if len(part) == 0:
            continue
        per_scrape = _gauge_by(part, by, how)
        out[label] = _bucket_increase(per_scrape, grid) if counter else _bucket_mean(per_scrape, grid)
    return out


def metric_saturation(metrics: ServerMetrics, grid: Grid) -> tuple[np.ndarray, list[str]]:
    """Buckets where the server said it was saturated, and which signals said so."""
    mask = np.zeros(grid.count, dtype=bool)
    signals: list[str] = []
    if metrics.empty:
        return mask, signals
    s = metrics.samples

    def mark(per_scrape: pd.Series, label: str) -> None:
        hot = per_scrape[per_scrape > 0] if label != "pool_saturation>=1" else per_scrape[per_scrape >= 1]
        if len(hot):
            idx = grid.index(hot.index.to_numpy(dtype=np.float64))
            mask[idx[idx >= 0]] = True
            signals.append(label)

    waiting = _family(s, WAITING)
    if len(waiting):
        total = waiting.groupby("ts_ns")["value"].sum().sort_index()
        positive = (total > 0).to_numpy()
        streak = np.cumsum(~positive)  # one id per run of positive scrapes
        lengths = pd.Series(positive.astype(int)).groupby(streak).transform("sum").to_numpy()
        mark(total[positive & (lengths >= SUSTAINED_SCRAPES)], "vllm:num_requests_waiting>0")
    queue = _family(s, QUEUE_SIZE)
    if len(queue):
        mark(queue.groupby("ts_ns")["value"].sum(), "queue_size>0")
    sat = _family(s, POOL_SATURATION)
    if len(sat):
        if sat["stage"].notna().any() and (sat["stage"] == "effective").any():
            sat = sat[sat["stage"] == "effective"]
        mark(sat.groupby("ts_ns")["value"].max(), "pool_saturation>=1")
    return mask, signals
