"""GPU/model performance presets for the simulated replicas.

Step time model (one engine step = one decode token for every running sequence plus a slice of
prefill): step_s = base_s + per_seq_s * decode_seqs + per_kv_token_s * kv_tokens_in_use
                  + prefill_per_token_s * prefill_tokens (+ prefill_step_s when the step holds any prefill).
Each number carries its source; "assumed" marks a round guess of the right order of magnitude. A preset may
also be a YAML file that ``rushhour calibrate`` wrote (``load_preset_file``): the same type, with a
``calibration`` saying which server its numbers were fitted to, each coefficient's interval and the fit's error.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rushhour.testbed.typed import ConfigError, from_dict

MAX_FILE_BYTES = 64 * 1024  # a preset file is a few dozen lines: anything larger is not one
FILE_SUFFIXES = (".yaml", ".yml")
PRESET_SCHEMA = "rushhour.preset/1"
MAX_QUANTILES = 101  # percentiles at most: a spread, not the samples


@dataclass(frozen=True)
class Calibration:
    """Where a calibrated preset's numbers come from and how well they predict its engine (rushhour calibrate)."""

    server: str  # the URL probed (scheme, host, port, path: never a credential)
    engine: str  # what the server said it runs, e.g. "vllm 0.32.0"
    date: str  # when, ISO 8601 UTC
    folder: str  # the calibration's folder: its probe runs, audited and sealed
    requests: int  # requests the coefficients were fitted on
    heldout: int  # requests of held-out probes the error was measured on
    mape: float  # held-out per-request mean absolute percentage error (0.05 = 5 %)
    pearson_r: float | None  # held-out predicted vs measured (None: too few to correlate)
    # coefficient → [low, high], its 95 % bootstrap interval
    intervals: dict[str, list[float]] = field(default_factory=dict, hash=False)
    # coefficient → held at zero because the data put it below (the rest refitted)
    pinned_zero: list[str] = field(default_factory=list, hash=False)
    # capacity number → where it came from: "server metrics …", "flag", "probes …"
    sources: dict[str, str] = field(default_factory=dict, hash=False)
    # kind of request ("prefill", "decode") → its held-out MAPE
    mape_by_kind: dict[str, float] = field(default_factory=dict, hash=False)
    # median client TTFT − engine queue − engine prefill: the server's time before a first token outside its engine
    # steps (HTTP, tokenising, hand-offs), which the replica model has not; None = unmeasured
    first_token_overhead_ms: float | None = None
    # the front end's CPU measured to lengthen the engine's steps (True), to run beside them (False), None = unmeasured
    front_end_shares_core: bool | None = None
    max_prompt_tokens: int | None = None  # the largest prompt probed: the fit holds up to it, beyond is extrapolated
    # the engine's speed in the decode ladder's second pass against its first (0.1: 10 % slower), the host's own
    # drift within the calibration; None = not measured (--quick runs the ladder once)
    speed_drift: float | None = None


@dataclass(frozen=True)
class Preset:
    """Performance and capacity numbers for one replica."""

    name: str
    model: str
    max_num_seqs: int
    kv_capacity_tokens: int
    max_num_batched_tokens: int
    base_s: float
    per_seq_s: float
    per_kv_token_s: float
    prefill_per_token_s: float
    block_tokens: int = 16  # vLLM default block size (vllm CacheConfig.block_size)
    # a step holding any prompt chunk costs this more, once (a calibrated engine's; the datasheet presets have none)
    prefill_step_s: float = 0.0
    # a calibrated server's time before its engine queues a request (HTTP, tokenising, hand-offs; measured as client
    # TTFT − engine queue − engine prefill): the simulator delays each request's arrival at the engine by it
    front_end_s: float = 0.0
    # that time's spread: its 0 %, 10 %, …, 100 % quantiles over the calibration's lone requests; the simulator draws
    # each request's delay from them (a real front end's time varies with where an arrival falls in an engine step,
    # so a constant leaves the light-load tail short); empty = ``front_end_s`` for every request
    front_end_quantiles_s: list[float] = field(default_factory=list, hash=False)
    # a calibrated server's front-end CPU per arriving request, served or refused (its API server's /metrics
    # process_cpu_seconds_total over designed requests), taken from the engine's step when both share a core
    # (measured: a front-end-only load slows the engine's own inter-token time); 0 = none
    front_end_cpu_s: float = 0.0
    calibration: Calibration | None = None  # a calibrated preset's provenance and error (None: a built-in)
    schema: str = PRESET_SCHEMA


PRESETS: dict[str, Preset] = {
    # Llama-3.1-8B BF16 on one H100 80GB SXM.
    "h100-llama8b": Preset(
        name="h100-llama8b",
        model="meta-llama/Llama-3.1-8B-Instruct",
        max_num_seqs=256,  # vLLM default --max-num-seqs
        # KV/token = 2*32 layers*8 kv heads*128 dim*2 B = 128 KiB; ~56 GB free at 0.9 util -> ~430k (derived)
        kv_capacity_tokens=430_000,
        max_num_batched_tokens=8192,  # vLLM V1 chunked-prefill budget for online serving (assumed)
        base_s=0.0055,  # 16 GB weights / 3.35 TB/s HBM3 = 4.8 ms + launch overhead (derived)
        per_seq_s=0.00004,  # sampling + scheduler overhead per sequence (assumed)
        per_kv_token_s=3.9e-8,  # 128 KiB read per cached token / 3.35 TB/s (derived)
        prefill_per_token_s=4.0e-5,  # 16 GFLOP/token at ~40% of 989 TFLOPS -> ~25k tok/s (assumed MFU)
    ),
    # Llama-3.1-70B BF16, tensor parallel 4 on A100 80GB SXM.
    "a100-llama70b-tp4": Preset(
        name="a100-llama70b-tp4",
        model="meta-llama/Llama-3.1-70B-Instruct",
        max_num_seqs=256,  # vLLM default --max-num-seqs
        # KV/token = 2*80 layers*8 kv heads*128 dim*2 B = 320 KiB; ~148 GB free over 4 GPUs (derived)
        kv_capacity_tokens=450_000,
        max_num_batched_tokens=8192,  # (assumed, as above)
        base_s=0.022,  # 35 GB weights per GPU / 2.0 TB/s = 17.5 ms + all-reduce (derived + assumed)
        per_seq_s=0.00008,  # (assumed)
        per_kv_token_s=4.0e-8,  # 80 KiB per GPU per token / 2.0 TB/s (derived)
        prefill_per_token_s=2.2e-4,  # 140 GFLOP/token at ~50% of 4*312 TFLOPS -> ~4.5k tok/s (assumed MFU)
    ),
    # Llama-3.1-8B BF16 on one NVIDIA L4 24GB: a small inference GPU that saturates at laptop-sized
    # load, so the demo shows queues and drops without needing thousands of client streams.
    "l4-llama8b": Preset(
        name="l4-llama8b",
        model="meta-llama/Llama-3.1-8B-Instruct",
        max_num_seqs=16,  # small batch for a 24 GB card (assumed)
        # KV/token 128 KiB; 24 GB - 16 GB weights - ~2 GB activations/overheads = ~6 GB -> ~48k (derived)
        kv_capacity_tokens=48_000,
        max_num_batched_tokens=2048,  # (assumed)
        base_s=0.055,  # 16 GB weights / 300 GB/s GDDR6 = 53 ms per decode step (derived)
        per_seq_s=0.0002,  # (assumed)
        per_kv_token_s=4.4e-7,  # 128 KiB per cached token / 300 GB/s (derived)
        prefill_per_token_s=3.3e-4,  # 16 GFLOP/token at ~40% of 121 TFLOPS FP16 -> ~3k tok/s (assumed MFU)
    ),
    # Tiny replica for fast tests: few slots, little KV, millisecond steps (all assumed).
    "tiny": Preset(
        name="tiny",
        model="testbed",
        max_num_seqs=4,
        kv_capacity_tokens=4096,
        max_num_batched_tokens=2048,
        base_s=0.002,
        per_seq_s=0.0002,
        per_kv_token_s=1.0e-7,
        prefill_per_token_s=1.0e-5,
    ),
}


def is_preset_file(name: str) -> bool:
    """A preset named by a YAML file's path, not a built-in name."""
    return name.lower().endswith(FILE_SUFFIXES)


def get_preset(name: str) -> Preset:
    """A built-in preset by name, or a preset file by its path (.yaml); ValueError in one line naming the problem."""
    if is_preset_file(name):
        return load_preset_file(Path(name))
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))}, or a calibrated "
                         "preset's .yaml file)") from None


def check_preset(preset: Preset) -> Preset:
    """The numbers a replica can run on: positive capacities, finite non-negative step terms, a step > 0."""
    for name in ("max_num_seqs", "kv_capacity_tokens", "max_num_batched_tokens", "block_tokens"):
        if getattr(preset, name) < 1:
            raise ConfigError(f"{name}: must be >= 1, got {getattr(preset, name)}")
    for name in ("base_s", "per_seq_s", "per_kv_token_s", "prefill_per_token_s", "prefill_step_s",
                 "front_end_s", "front_end_cpu_s"):
        value = getattr(preset, name)
        if not math.isfinite(value) or value < 0 or value > 3600:
            raise ConfigError(f"{name}: must be a finite number of seconds in [0, 3600], got {value!r}")
    q = preset.front_end_quantiles_s
    if q and (len(q) < 2 or len(q) > MAX_QUANTILES or any(not math.isfinite(v) or v < 0 or v > 3600 for v in q)
              or any(b < a for a, b in itertools.pairwise(q))):
        raise ConfigError(f"front_end_quantiles_s: must be 2 to {MAX_QUANTILES} non-decreasing seconds in [0, 3600], "
                          f"got {len(q)} values")
    if preset.base_s <= 0:
        raise ConfigError("base_s: must be > 0 (an engine step takes time)")
    if preset.schema != PRESET_SCHEMA:
        raise ConfigError(f"schema: expected {PRESET_SCHEMA!r}, got {preset.schema!r}")
    return preset


def load_preset_file(path: Path) -> Preset:
    """A preset from its YAML file (hostile input: bounded, typed, checked); ValueError in one line."""
    import yaml  # lazily: the testbed's server imports this module and never needs YAML for a built-in

    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"preset file {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"preset file {path}: larger than {MAX_FILE_BYTES // 1024} KiB, not a preset")
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"preset file {path}: not YAML ({first})") from None
    try:
        return check_preset(from_dict(Preset, data))
    except (ConfigError, RecursionError) as exc:
        raise ValueError(f"preset file {path}: {exc}") from None


def preset_dict(preset: Preset) -> dict[str, Any]:
    """The preset as plain data, in field order (what ``load_preset_file`` reads back)."""
    out = {f.name: getattr(preset, f.name) for f in fields(preset)}
    out["calibration"] = asdict(preset.calibration) if preset.calibration is not None else None
    return out


def dump_preset(preset: Preset, header: str = "") -> str:
    """The preset as YAML text, with ``header`` as comment lines on top."""
    import yaml

    lines = "".join(f"# {line}\n" for line in header.splitlines())
    return lines + yaml.safe_dump(preset_dict(check_preset(preset)), sort_keys=False, allow_unicode=True)


def provenance(name: str) -> dict[str, Any] | None:
    """What a run's replicas rest on when ``name`` is a calibrated preset's file: the file and its SHA-256, the
    server and engine it was fitted to, when, and how well it predicted held-out requests; None for a built-in."""
    import hashlib

    if not is_preset_file(name):
        return None
    preset = load_preset_file(Path(name))
    cal = preset.calibration
    out: dict[str, Any] = {"file": name, "name": preset.name,
                           "sha256": hashlib.sha256(Path(name).read_bytes()).hexdigest()}
    if cal is None:
        return {**out, "calibrated": False}
    return {**out, "calibrated": True, "server": cal.server, "engine": cal.engine, "date": cal.date,
            "mape": cal.mape, "pearson_r": cal.pearson_r, "requests": cal.requests, "heldout": cal.heldout,
            "speed_drift": cal.speed_drift}
