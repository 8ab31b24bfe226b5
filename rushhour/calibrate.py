"""``rushhour calibrate``: fit the simulator's replica model to a real server from designed probe runs.

The probes are rushhour runs (a trace replayed at the server, kept and audited in the calibration's folder): one
request at a time of growing prompts (prefill), many streams at once (the batch the engine admits at once, found
by its own queue times), then N streams together at short and long contexts (decode). The engine's own timing
(vLLM's per-request ``metrics``) or else the client's makes one row per request (studies/engine_fit.py); the fit's
coefficients, intervals and held-out error go to a preset file the simulator reads (testbed/presets.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import statistics
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import typer

PERSONA = "probes"
MAX_BODY = 4 * 2**20  # a /metrics page or /version answer larger than this is not read further
TIMEOUT_S = 10.0
DEFAULT_BATCHED_TOKENS = 2048  # vLLM's default for an online server on CPU (vllm/engine/arg_utils.py); an assumption
SATURATE_STREAMS = 16  # streams sent at once to find how many the engine runs together (without --max-num-seqs)
CACHE_INFO = re.compile(r'^vllm:cache_config_info\{(.*)\}\s', re.M)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class CalibrationError(ValueError):
    """The calibration could not measure what it needs (one line; exit 2)."""


@dataclass(frozen=True)
class Probe:
    """Requests sent together at ``at_s``: ``count`` of ``prompt`` tokens, each asking ``output`` tokens."""

    name: str
    kind: str  # warmup, prefill, saturate, decode
    prompt: int
    output: int
    count: int = 1
    at_s: float = 0.0


@dataclass
class Facts:
    """What the server says of itself, and where each number came from."""

    engine: str = "unknown"
    model: str | None = None
    kv_capacity_tokens: int | None = None
    block_tokens: int | None = None
    sources: dict[str, str] = field(default_factory=dict)


def public_url(url: str) -> str:
    """The URL without user info, query or fragment: what a preset and a report may name."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _get(url: str) -> str:
    """A bounded GET (text), or CalibrationError in one line."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=TIMEOUT_S) as resp:
            return resp.read(MAX_BODY).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise CalibrationError(f"{public_url(url)}: {str(reason).splitlines()[0][:160]}") from None


def server_facts(target: str) -> Facts:
    """The engine's version (/version), served model (/v1/models) and KV cache (vllm:cache_config_info on /metrics)."""
    facts = Facts()
    base = target.rstrip("/")
    try:
        version = json.loads(_get(base + "/version")).get("version")
        if isinstance(version, str) and len(version) <= 40:
            facts.engine = f"vllm {version}"
    except (CalibrationError, ValueError, AttributeError):
        pass
    try:
        models = json.loads(_get(base + "/v1/models")).get("data") or []
        if models and isinstance(models[0], dict) and isinstance(models[0].get("id"), str):
            facts.model = models[0]["id"][:200]
    except (CalibrationError, ValueError, AttributeError):
        pass
    try:
        page = _get(base + "/metrics")
    except CalibrationError as exc:
        if facts.model is None and facts.engine == "unknown":  # nothing answered: say so, not "give --model"
            raise CalibrationError(f"cannot reach the server: {exc}") from None
        return facts
    match = CACHE_INFO.search(page)
    if match:
        labels = dict(LABEL.findall(match.group(1)))
        try:
            blocks, size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
        except (KeyError, ValueError):
            return facts
        if 0 < blocks <= 10**9 and 0 < size <= 10**5:
            facts.kv_capacity_tokens, facts.block_tokens = blocks * size, size
            facts.sources["kv_capacity_tokens"] = (f"server: vllm:cache_config_info num_gpu_blocks {blocks} × "
                                                   f"block_size {size}")
            facts.sources["block_tokens"] = "server: vllm:cache_config_info block_size"
    return facts


# --------------------------------------------------------------------------- the probes (pure)


def prefill_probes(max_prompt: int, reps: int, quick: bool) -> list[Probe]:
    """One request alone per prompt size, sizes doubling up to ``max_prompt`` (two warm-up requests first)."""
    sizes = [32, 128, 384, 768, 1024] if quick else [32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048]
    sizes = [s for s in sizes if s <= max_prompt] or [max_prompt]
    out = [Probe("warmup", "warmup", 64, 8, 1), Probe("warmup", "warmup", 256, 8, 1)]
    out += [Probe(f"prefill-{p}", "prefill", p, 1, 1) for p in sizes for _ in range(reps)]
    return out


def decode_probes(max_num_seqs: int, max_prompt: int, tokens: int, quick: bool) -> list[Probe]:
    """N streams at once, at short and long contexts, N up to the batch the engine runs together; without
    ``quick`` the ladder twice, the second time backwards.

    Twice because one probe is a fraction of a second of one host's speed, which drifts (measured on a shared
    2-core VM: the same batch 4.4 ms a token in one probe, 6.8 ms in the one before), and a step term fitted on
    one pass carries that drift; backwards so that a drift across the ladder weighs on small and large batches
    alike. A probe and its repeat share a name, so both are fitted or both held out."""
    if max_num_seqs <= 8:
        batches = list(range(1, max_num_seqs + 1))
    else:
        batches = sorted({min(max_num_seqs, 2**i) for i in range(0, 1 + math.ceil(math.log2(max_num_seqs)))})
    contexts = [64, min(768, max_prompt)] if quick else [64, min(384, max_prompt), max_prompt]
    ladder = [Probe(f"decode-{n}x{c}", "decode", c, tokens, n) for c in dict.fromkeys(contexts) for n in batches]
    return ladder if quick else [*ladder, *reversed(ladder)]


def laid_out(probes: Sequence[Probe], gap_s: float, length_s: dict[str, float] | None = None) -> list[Probe]:
    """Each probe at its own time: the previous one's expected length (``length_s`` by kind, else 0) plus ``gap_s``."""
    out: list[Probe] = []
    t = 0.0
    for p in probes:
        out.append(dataclasses.replace(p, at_s=round(t, 3)))
        t += gap_s + (length_s or {}).get(p.kind, 0.0)
    return out


def heldout(probes: Sequence[Probe]) -> set[str]:
    """Every third probe of each kind (the second, fifth, …), never fitted on: the fit's error is measured there."""
    out: set[str] = set()
    for kind in ("prefill", "decode"):
        names = list(dict.fromkeys(p.name for p in probes if p.kind == kind))
        out.update(n for i, n in enumerate(names) if i % 3 == 1)
    return out


def trace_rows(probes: Sequence[Probe]) -> tuple[str, list[Probe]]:
    """The Azure-format trace of the probes and, by row index, the probe each row belongs to."""
    t0 = dt.datetime(2026, 1, 1)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows: list[Probe] = []
    for p in sorted(probes, key=lambda p: p.at_s):
        for _ in range(p.count):
            lines.append(f"{(t0 + dt.timedelta(seconds=p.at_s)).isoformat(timespec='microseconds')},{p.prompt},"
                         f"{p.output}")
            rows.append(p)
    return "\n".join(lines) + "\n", rows


def probe_scenario(name: str, target: str, profile: str, model: str, trace: str, end_s: float,
                   max_prompt: int, max_output: int) -> dict[str, Any]:
    """The scenario of one probe run: the trace replayed alone, outputs pinned, the server's metrics scraped."""
    return {
        "name": name,
        "description": "rushhour calibrate: designed probes of the engine's step time",
        "seed": 1,
        "target": {"url": target, "profile": profile, "model": model, "dialect": "openai-chat", "stream": True,
                   "pin_output": True, "metrics": {"url": "auto", "interval_s": "1s"}},
        "calibration": {"probes": 0},
        "tiers": [{"name": "probe", "priority": 0}],
        "personas": [{"kind": "trace_replay", "name": PERSONA, "tier": "probe", "trace": trace, "format": "azure",
                      "max_in_flight": 512, "max_prompt_tokens": max_prompt, "max_output_tokens": max_output}],
        "phases": [{"name": "probe", "duration": f"{max(1.0, end_s):.3f}s"}],
        "drain_s": 120,
    }


# --------------------------------------------------------------------------- running and reading


def run_probes(folder: Path, name: str, probes: Sequence[Probe], target: str, profile: str, model: str,
               max_prompt: int, max_output: int) -> tuple[Path, list[Probe]]:
    """One probe run (the trace and scenario written beside it), audited; (its run folder, row → probe)."""
    import yaml

    from rushhour.audit import AuditError, run_audit
    from rushhour.loadgen.prepare import RunOptions
    from rushhour.loadgen.runner import run_scenario

    text, rows = trace_rows(probes)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.csv").write_text(text)
    (folder / f"{name}.probes.json").write_text(json.dumps([dataclasses.asdict(p) for p in rows]))
    end_s = max(p.at_s for p in probes) + 0.5
    scenario = probe_scenario(name, target, profile, model, f"{name}.csv", end_s, max_prompt, max_output)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    result = run_scenario(path, RunOptions(out_dir=folder / "runs", live=False, keep_going=True))
    if result.run_dir is None:
        raise CalibrationError(f"the {name} probe run did not start (exit {result.exit_code}; "
                               f"{result.stop_reason or 'no run folder'})")
    try:
        run_audit(result.run_dir)  # sealed: the calibration's evidence can be verified (rushhour verify)
    except AuditError as exc:
        raise CalibrationError(f"the {name} probe run could not be audited: {exc}") from None
    return result.run_dir, rows


def served(run_dir: Path, rows: Sequence[Probe]) -> list[tuple[Probe, dict[str, Any]]]:
    """Each request record of the probe run with its probe (by the trace row in its session id)."""
    from rushhour.records.reader import iter_run

    out = []
    for record in iter_run(run_dir, "request"):
        match = re.fullmatch(rf"{PERSONA}-r(\d+)", str(record.get("session_id", "")))
        if match and int(match.group(1)) < len(rows):
            out.append((rows[int(match.group(1))], record))
    return out


def discovered_seqs(pairs: Sequence[tuple[Probe, dict[str, Any]]]) -> tuple[int, str] | None:
    """How many of the saturating streams the engine scheduled at once (its queue time under half a decode), and
    how that was found; None without the engine's queue times."""
    sat = [r for p, r in pairs if p.kind == "saturate" and r.get("status") == 200
           and r.get("metrics_queue_time_ms") is not None and r.get("metrics_generation_time_ms") is not None]
    if len(sat) < 2:
        return None
    decode_ms = statistics.median(float(r["metrics_generation_time_ms"]) for r in sat)
    immediate = sum(1 for r in sat if float(r["metrics_queue_time_ms"]) < decode_ms / 2)
    sent = sum(1 for p, _ in pairs if p.kind == "saturate")
    if immediate >= sent:
        return immediate, f"probes: all {sent} streams sent at once ran at once (at least {immediate})"
    return immediate, (f"probes: {immediate} of {sent} streams sent at once were scheduled at once "
                       f"(engine queue time under half a decode)")


def first_token_gaps_ms(pairs: Sequence[tuple[Probe, dict[str, Any]]]) -> list[float]:
    """Client TTFT − engine queue − engine prefill of each prefill probe (each request alone): the server's time
    outside its engine steps before a first token (HTTP, tokenising, hand-offs), unloaded.

    Only requests sent alone: in a burst the front end takes requests in turn, and vLLM stamps a request queued
    when its engine core takes it in, between steps, so waiting for a running step shows here too (tens of ms
    more, measured) — the simulator counts that wait as engine queue, so it must not be counted twice."""
    gaps = []
    for p, r in pairs:
        q, pre = r.get("metrics_queue_time_ms"), r.get("metrics_time_to_first_token_ms")
        timed = isinstance(r.get("first_token_ns"), int) and isinstance(r.get("sent_ns"), int)
        if p.kind == "prefill" and r.get("status") == 200 and q is not None and pre is not None and timed:
            gaps.append((r["first_token_ns"] - r["sent_ns"]) / 1e6 - float(q) - float(pre))
    return gaps


def first_token_overhead_ms(pairs: Sequence[tuple[Probe, dict[str, Any]]]) -> float | None:
    """The median of ``first_token_gaps_ms`` (None without one)."""
    gaps = first_token_gaps_ms(pairs)
    return round(statistics.median(gaps), 3) if gaps else None


def speed_drift(pairs: Sequence[tuple[Probe, dict[str, Any]]]) -> tuple[float, int] | None:
    """How much slower (> 0) or faster (< 0) the engine ran the decode ladder's second pass than its first: the
    median over the probes run twice of the repeat's mean inter-token time over the first's, less 1, with how many
    probes it rests on; None without a repeated probe the engine timed.

    The host's own drift, measured inside the calibration: a held-out run later is off by about as much again,
    whatever the fit (on a shared 2-core VM, 7 Dec 2026: the same engine at 4.0 and 6.3 ms a token 24 minutes
    apart)."""
    passes: dict[str, dict[float, list[float]]] = {}
    for p, r in pairs:
        if p.kind == "decode" and r.get("status") == 200 and r.get("metrics_mean_itl_ms"):
            passes.setdefault(p.name, {}).setdefault(p.at_s, []).append(float(r["metrics_mean_itl_ms"]))
    ratios = []
    for by_time in passes.values():
        if len(by_time) >= 2:
            first, *_, last = (statistics.fmean(by_time[t]) for t in sorted(by_time))
            if first > 0:
                ratios.append(last / first)
    return (round(statistics.median(ratios) - 1, 4), len(ratios)) if ratios else None


MIN_SPREAD_SAMPLES = 8  # fewer lone requests than this give no spread worth drawing from: the median alone


def front_end_quantiles_s(gaps_ms: Sequence[float]) -> list[float]:
    """The gaps' 0 %, 10 %, …, 100 % quantiles in seconds (none below 0: a gap under 0 is the clocks' noise), for
    the simulator to draw each request's front-end time from; empty with fewer than ``MIN_SPREAD_SAMPLES``."""
    if len(gaps_ms) < MIN_SPREAD_SAMPLES:
        return []
    ordered = sorted(max(0.0, g) for g in gaps_ms)
    cuts = statistics.quantiles(ordered, n=10, method="inclusive")
    return [round(v / 1000, 6) for v in (ordered[0], *cuts, ordered[-1])]


# --------------------------------------------------------------------------- the calibration


@dataclass
class Settings:
    """What ``rushhour calibrate`` was asked."""

    target: str
    profile: str = "vllm"
    model: str | None = None
    name: str | None = None
    folder: Path = Path("runs")
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    max_prompt_tokens: int = 1024
    decode_tokens: int = 48
    gap_s: float = 0.5
    quick: bool = False
    max_mape: float = 0.20


@dataclass
class Outcome:
    """A calibration's result: the preset (None when refused), the fit's figures, the page's data."""

    preset: Any | None
    report: dict[str, Any]
    refused: str | None = None


def calibrate(s: Settings, say: Any = print) -> Outcome:
    """Probe, fit, and build the preset (or the refusal); CalibrationError when something could not be measured."""
    from rushhour.front_probe import measure as measure_front
    from rushhour.studies.engine_fit import COEFFICIENTS, Fit, FitError, fit, measured, observations
    from rushhour.testbed.presets import PRESET_SCHEMA, Calibration, Preset, check_preset

    facts = server_facts(s.target)
    model = s.model or facts.model
    if not model:
        raise CalibrationError(f"{public_url(s.target)}: no model named by /v1/models: give --model")
    kv = s.kv_capacity_tokens or facts.kv_capacity_tokens
    sources = dict(facts.sources)
    if s.kv_capacity_tokens:
        sources["kv_capacity_tokens"] = "flag --kv-capacity-tokens"
    if kv is None:
        raise CalibrationError("the KV cache's size is unknown (no vllm:cache_config_info on /metrics): give "
                               "--kv-capacity-tokens")
    batched = s.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    sources["max_num_batched_tokens"] = ("flag --max-num-batched-tokens" if s.max_num_batched_tokens else
                                         f"assumed: vLLM's CPU online-serving default {DEFAULT_BATCHED_TOKENS} "
                                         "(the server does not publish it; give --max-num-batched-tokens)")
    max_prompt = min(s.max_prompt_tokens, kv // 4)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = s.folder / f"calibrate-{stamp}"
    reps = 1 if s.quick else 2

    # round 1: warm-up, prefill ladder, and (without --max-num-seqs) a saturating burst
    first = prefill_probes(max_prompt, reps, s.quick)
    if s.max_num_seqs is None:
        first.append(Probe("saturate", "saturate", 64, s.decode_tokens, SATURATE_STREAMS))
    first = laid_out(first, s.gap_s, {"prefill": s.gap_s})
    say(f"calibrate: {len(first)} probes of prefill{'' if s.max_num_seqs else ' and batch size'} at "
        f"{public_url(s.target)} ({facts.engine}, model {model}) → {folder}")
    run1, rows1 = run_probes(folder, "round1", first, s.target, s.profile, model, max_prompt, s.decode_tokens)
    pairs = served(run1, rows1)
    seqs: int | None = s.max_num_seqs
    if seqs is not None:
        sources["max_num_seqs"] = "flag --max-num-seqs"
    else:
        found = discovered_seqs(pairs)
        if found is None:
            raise CalibrationError("the batch the engine runs at once is unmeasured (no engine queue times in the "
                                   "answers: vLLM's --enable-per-request-metrics): give --max-num-seqs")
        seqs, sources["max_num_seqs"] = found
    # a decode probe's length from round 1: the slowest time per token seen, over the tokens asked
    itl = [float(r["metrics_mean_itl_ms"]) / 1000 for _, r in pairs if r.get("metrics_mean_itl_ms")]
    prefill = [float(r["metrics_time_to_first_token_ms"]) / 1000 for p, r in pairs
               if p.kind == "prefill" and r.get("metrics_time_to_first_token_ms")]
    per_token = max(itl) if itl else 3 * (max(prefill) if prefill else 0.1)
    second = decode_probes(seqs, max_prompt, s.decode_tokens, s.quick)
    second = laid_out([Probe("warmup", "warmup", 64, 8, 1), *second], s.gap_s,
                      {"decode": 1.5 * per_token * (s.decode_tokens + 2), "warmup": 0.5})
    say(f"calibrate: {sum(p.count for p in second)} requests in {len(second)} decode probes (batches up to {seqs})")
    run2, rows2 = run_probes(folder, "round2", second, s.target, s.profile, model, max_prompt, s.decode_tokens)

    front = measure_front(s.target, model, say)

    obs = []
    all_pairs: list[tuple[Probe, dict[str, Any]]] = []
    for run_dir, rows in ((run1, rows1), (run2, rows2)):
        run_pairs = served(run_dir, rows)
        all_pairs += run_pairs
        reqs = [m for p, r in run_pairs if (m := measured(r, p.name)) is not None]
        obs += [o for o in observations(reqs, batched) if not o.probe.startswith("warmup")]
    probes = [p for p in first + second if p.kind in ("prefill", "decode")]
    held = heldout(probes)
    report: dict[str, Any] = {
        "server": public_url(s.target), "engine": facts.engine, "model": model, "folder": str(folder),
        "runs": [str(run1), str(run2)], "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "probes": len(probes), "heldout_probes": sorted(held), "requests": len(all_pairs),
        "served": sum(1 for _, r in all_pairs if r.get("status") == 200),
        "engine_timing": sum(1 for _, r in all_pairs if r.get("metrics_time_to_first_token_ms") is not None),
        "first_token_overhead_ms": first_token_overhead_ms(all_pairs),
        "front_end_quantiles_s": front_end_quantiles_s(first_token_gaps_ms(all_pairs)), "sources": sources,
        "front_end": dataclasses.asdict(front),
        "speed_drift": speed_drift(all_pairs),
        "max_prompt_tokens": max_prompt,
        "capacity": {"max_num_seqs": seqs, "kv_capacity_tokens": kv, "max_num_batched_tokens": batched,
                     "block_tokens": facts.block_tokens or 16},
    }
    result: Fit | None
    refused: str | None
    try:
        result = fit(obs, held, max_mape=s.max_mape)
        refused = None
    except FitError as exc:
        result, refused = exc.fit, str(exc)
    if result is not None:
        report["fit"] = dataclasses.asdict(result)
    report["refused"] = refused
    if refused is not None or result is None:
        return Outcome(None, report, refused or "no fit")
    c = result.coefficients
    # the front end's CPU per request goes into the engine's steps only where it was measured to share their core
    front_cpu = front.cpu_s if front.shares_core and front.cpu_s is not None else 0.0
    sources["front_end_cpu_s"] = (f"probes: {front.evidence}" if front.cpu_s is not None else
                                  f"unmeasured ({front.evidence}): none modelled")
    intervals = {k: [float(f"{v:.6g}") for v in result.intervals[k]] for k in COEFFICIENTS}
    if front.interval is not None and front_cpu:
        intervals["front_end_cpu_s"] = [float(f"{v:.6g}") for v in front.interval]
    name = s.name or f"calibrated-{re.sub(r'[^a-z0-9]+', '-', (facts.engine + '-' + model).lower()).strip('-')}"
    preset = check_preset(Preset(
        name=name[:80], model=model, max_num_seqs=seqs, kv_capacity_tokens=kv, max_num_batched_tokens=batched,
        block_tokens=facts.block_tokens or 16, prefill_step_s=c["prefill_step_s"], base_s=c["base_s"],
        front_end_s=max(0.0, (report["first_token_overhead_ms"] or 0.0) / 1000), front_end_cpu_s=front_cpu,
        front_end_quantiles_s=report["front_end_quantiles_s"],
        per_seq_s=c["per_seq_s"], per_kv_token_s=c["per_kv_token_s"], prefill_per_token_s=c["prefill_per_token_s"],
        schema=PRESET_SCHEMA,
        calibration=Calibration(
            server=report["server"], engine=facts.engine, date=report["date"], folder=str(folder),
            requests=result.train_n, heldout=result.heldout_n, mape=round(result.mape, 4),
            pearson_r=None if result.pearson_r is None else round(result.pearson_r, 4),
            intervals=intervals, front_end_shares_core=front.shares_core,
            pinned_zero=list(result.pinned_zero), sources=sources,
            mape_by_kind={k.kind: round(k.mape, 4) for k in result.kinds},
            first_token_overhead_ms=report["first_token_overhead_ms"], max_prompt_tokens=max_prompt,
            speed_drift=None if report["speed_drift"] is None else report["speed_drift"][0])))
    return Outcome(preset, report)


def preset_note(preset: str) -> str:
    """One line for a plan's notes: the calibrated preset its cells rest on and its error, or that the built-in
    numbers are not calibrated."""
    from rushhour.testbed.presets import provenance

    found = provenance(preset)
    if found is None:
        return (f"replicas: the built-in preset {preset!r} (datasheet-derived and assumed step times, not calibrated "
                "against a real engine: `rushhour calibrate`)")
    if not found.get("calibrated"):
        return f"replicas: the preset file {found['file']}, which holds no calibration"
    r = found.get("pearson_r")
    return (f"replicas: the calibrated preset {found['name']} ({found['file']}, sha256 {found['sha256'][:12]}), "
            f"fitted to {found['engine']} at {found['server']} on {found['date']}: held-out requests "
            f"{float(found['mape']):.1%} off on average (MAPE){'' if r is None else f', Pearson r {float(r):.3f}'}")


# --------------------------------------------------------------------------- the verb


def command(
    target: Annotated[str, typer.Option(help="the server to calibrate against, e.g. http://127.0.0.1:8000")],
    profile: Annotated[str, typer.Option(help="its stack profile (vllm: per-request engine timing)")] = "vllm",
    out: Annotated[Path, typer.Option("--out", help="the preset file to write")] = Path("calibrated.yaml"),
    runs: Annotated[Path, typer.Option(help="folder for the calibration's probe runs and page")] = Path("runs"),
    model: Annotated[str | None, typer.Option(help="model to request (default: the server's first)")] = None,
    name: Annotated[str | None, typer.Option(help="the preset's name (default: from engine and model)")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(
        min=1, max=100_000, help="the engine's --max-num-seqs (default: found by a saturating probe)")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        min=1, max=10_000_000, help="the engine's --max-num-batched-tokens (default: vLLM's CPU default, "
        "said as assumed)")] = None,
    kv_capacity_tokens: Annotated[int | None, typer.Option(
        min=1, max=10**9, help="KV cache tokens (default: from vllm:cache_config_info)")] = None,
    max_prompt_tokens: Annotated[int, typer.Option(
        min=16, max=1_000_000, help="largest probe prompt: the preset is fitted up to it (a longer prompt is "
        "extrapolated; vLLM on CPU grows faster than linearly past ~1,000 tokens)")] = 1024,
    decode_tokens: Annotated[int, typer.Option(min=4, max=4096, help="tokens each decode probe asks for")] = 48,
    gap: Annotated[float, typer.Option(min=0.05, max=60.0, help="seconds between probes")] = 0.5,
    max_mape: Annotated[float, typer.Option(min=0.01, max=1.0, help="refuse a fit whose held-out requests are "
                                            "predicted more than this far off on average")] = 0.20,
    quick: Annotated[bool, typer.Option("--quick", help="fewer probes (tests, a first look)")] = False,
) -> None:
    """Fit the simulator's replica model to a real server: probe it, fit step times with intervals, write a preset."""
    from rushhour.consoles import make_console, print_error
    from rushhour.reports.calibration import render_calibration
    from rushhour.scenarios import ScenarioError
    from rushhour.testbed.presets import dump_preset

    console = make_console(stderr=True)
    if urlsplit(target).scheme not in ("http", "https") or not urlsplit(target).hostname:
        print_error(console, f"--target {target!r}: give an http(s) URL")
        raise typer.Exit(2)
    settings = Settings(target=target, profile=profile, model=model, name=name, folder=runs,
                        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                        kv_capacity_tokens=kv_capacity_tokens, max_prompt_tokens=max_prompt_tokens,
                        decode_tokens=decode_tokens, gap_s=gap, quick=quick, max_mape=max_mape)
    try:
        outcome = calibrate(settings, say=lambda line: console.print(line, highlight=False, markup=False))
    except (CalibrationError, ScenarioError, FileNotFoundError, ValueError) as exc:
        print_error(console, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise typer.Exit(2) from None
    folder = Path(outcome.report["folder"])
    (folder / "calibration.json").write_text(json.dumps(outcome.report, indent=1, default=str) + "\n")
    page = folder / "calibration.md"
    page.write_text(render_calibration(outcome.report, None if outcome.preset is None else str(out)))
    if outcome.preset is None:
        print_error(console, f"no preset written: {outcome.refused} (the page: {page})")
        raise typer.Exit(1)
    cal = outcome.preset.calibration
    out.write_text(dump_preset(outcome.preset, f"rushhour calibrate against {cal.server} ({cal.engine}) on "
                               f"{cal.date}\nthe probes, fit and error: {page}"))
    fit = outcome.report["fit"]
    console.print(f"fit: held-out MAPE {fit['mape']:.1%}"
                  + ("" if fit["pearson_r"] is None else f", Pearson r {fit['pearson_r']:.3f}")
                  + f" on {fit['heldout_n']} requests; " + ", ".join(
                      f"{k} {v:.4g} [{fit['intervals'][k][0]:.3g}, {fit['intervals'][k][1]:.3g}]"
                      for k, v in fit["coefficients"].items()), highlight=False, markup=False)
    typer.echo(f"preset: {out}")
    typer.echo(f"page:   {page}")
