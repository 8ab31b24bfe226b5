"""An llm-d-planner recommendation read as scenarios: its model and GPU as a preset, its traffic and SLOs as tiers.

The file is what llm-d-planner's ``POST /api/v1/recommend`` returns: a ``DeploymentRecommendation``
(``src/planner/shared/schemas/recommendation.py`` in github.com/llm-d-incubation/llm-d-planner) —
``model_id``, ``gpu_config`` {``gpu_type``, ``gpu_count``, ``tensor_parallel``, ``replicas``},
``traffic_profile`` {``prompt_tokens``, ``output_tokens``, ``expected_qps``} and ``slo_targets``
{``ttft_p95_target_ms``, ``itl_p95_target_ms``, ``e2e_p95_target_ms``, ``percentile``}. A ranked response
(``/ranked-recommend-from-spec``) is read through its ``balanced`` list's first entry. The file is hostile
input: its size, nesting and every field used are checked, and each problem is one line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BYTES = 2_000_000  # a recommendation with its alternatives is a few tens of kB
MAX_QPS = 10_000.0
MAX_TOKENS = 200_000
MAX_REPLICAS = 4096

# llm-d-planner's GPU names and aliases (its data/configuration/gpu_catalog.json) → rushhour's GPU names.
GPU_ALIASES: dict[str, str] = {
    "h100": "H100", "nvidia-h100": "H100", "h100-80gb": "H100", "nvidia-h100-80gb": "H100",
    "nvidia-h100-80gb-hbm3": "H100",
    "a100-80": "A100-80", "a100-80gb": "A100-80", "nvidia-a100-80gb": "A100-80", "nvidia-a100-sxm4-80gb": "A100-80",
    "l4": "L4", "nvidia-l4": "L4",
}

# The one table: (GPU, model family, tensor parallel) → the preset that imitates it (testbed/presets.py).
# Llama 3, 3.1 and 3.3 share an architecture per size (layers, heads, KV heads), so one preset serves each size.
PRESET_TABLE: list[tuple[str, str, int, str]] = [
    ("H100", "llama-3-8b", 1, "h100-llama8b"),
    ("A100-80", "llama-3-70b", 4, "a100-llama70b-tp4"),
    ("L4", "llama-3-8b", 1, "l4-llama8b"),
]
_FAMILY = {"llama-3-8b": re.compile(r"llama-3(\.\d)?-8b"), "llama-3-70b": re.compile(r"llama-3(\.\d)?-70b")}
# weights that are not BF16 run at other speeds and sizes than the presets model
_QUANTISED = re.compile(r"fp8|w8a8|w4a16|int8|int4|awq|gptq|quantized|gguf")
PERCENTILES = ("p50", "p90", "p95", "p99")


class PlannerError(ValueError):
    """A recommendation rushhour cannot check, said in one line."""


@dataclass(frozen=True)
class Recommendation:
    """What rushhour takes from a planner's recommendation."""

    source: str
    model: str
    gpu: str  # rushhour's name (GPU_ALIASES)
    tensor_parallel: int
    replicas: int
    preset: str
    prompt_tokens: int
    output_tokens: int
    qps: float
    percentile: str
    ttft_ms: float
    itl_ms: float
    e2e_ms: float | None
    use_case: str
    predicted: dict[str, float]  # the planner's own predictions (ttft/itl/e2e p95, throughput), for the report


def _nesting(text: str, limit: int = 64) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped = not escaped and ch == "\\"
            if ch == '"' and not escaped:
                in_string = False
            elif ch != "\\":
                escaped = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif ch in "]}":
            depth -= 1
    return deepest


def read_recommendation(path: Path) -> Recommendation:
    """Read and check a planner file; ``PlannerError`` (one line) for anything rushhour cannot use."""
    name = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise PlannerError(f"{name}: {size:,} bytes, more than a recommendation holds (limit {MAX_BYTES:,})")
        raw = path.read_bytes()
    except OSError as exc:
        raise PlannerError(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerError(f"{name}: not UTF-8 text") from None
    if _nesting(text) > 64:
        raise PlannerError(f"{name}: JSON nested deeper than 64 levels")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PlannerError(f"{name}: not JSON ({str(exc).splitlines()[0][:120]})") from None
    return parse_recommendation(doc, name)


def _get(doc: dict[str, Any], key: str, source: str) -> Any:
    value = doc.get(key)
    if value is None:
        raise PlannerError(f"{source}: {key} missing (an llm-d-planner DeploymentRecommendation has it)")
    return value


def _number(value: Any, what: str, source: str, low: float, high: float, integer: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = float(value).is_integer()
    if not ok or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise PlannerError(f"{source}: {what} must be {kind} in [{low:g}, {high:g}], got {str(value)[:40]!r}")
    return float(value)


def _text(value: Any, what: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 300:
        raise PlannerError(f"{source}: {what} must be a short text, got {str(value)[:40]!r}")
    return value.strip()


def preset_for(gpu_type: str, model: str, tensor_parallel: int, source: str = "recommendation") -> tuple[str, str]:
    """(rushhour GPU name, preset) for a planner's GPU, model and TP; one-line error naming the known ones."""
    gpu = GPU_ALIASES.get(gpu_type.strip().lower())
    if gpu is None:
        known = sorted({g for g, _, _, _ in PRESET_TABLE})
        raise PlannerError(f"{source}: no preset for GPU {gpu_type[:40]!r} (known GPUs: {', '.join(known)})")
    name = model.lower()
    if _QUANTISED.search(name):
        raise PlannerError(f"{source}: model {model[:80]!r} is quantised; the presets model BF16 weights only")
    for g, family, tp, preset in PRESET_TABLE:
        if g == gpu and _FAMILY[family].search(name) and tp == tensor_parallel:
            return gpu, preset
    combos = "; ".join(f"{g} {f} TP {tp}" for g, f, tp, _ in PRESET_TABLE)
    raise PlannerError(f"{source}: no preset for {model[:80]!r} on {gpu} with TP {tensor_parallel} "
                       f"(known: {combos})")


def parse_recommendation(doc: Any, source: str = "recommendation") -> Recommendation:
    """Check a parsed planner document and take what the plan needs from it."""
    if isinstance(doc, dict) and "balanced" in doc and "gpu_config" not in doc:  # a ranked response
        ranked = doc.get("balanced")
        if not isinstance(ranked, list) or not ranked:
            raise PlannerError(f"{source}: a ranked response with no 'balanced' recommendation")
        doc = ranked[0]
    if not isinstance(doc, dict):
        raise PlannerError(f"{source}: not an llm-d-planner recommendation (a JSON object with gpu_config, "
                           "traffic_profile, slo_targets)")
    gpu_config = doc.get("gpu_config")
    if gpu_config is None:
        reason = doc.get("reasoning")
        why = f": {reason[:160]}" if isinstance(reason, str) else ""
        raise PlannerError(f"{source}: the planner found no configuration to check (gpu_config is null){why}")
    if not isinstance(gpu_config, dict):
        raise PlannerError(f"{source}: gpu_config must be an object")
    traffic, slo = _get(doc, "traffic_profile", source), _get(doc, "slo_targets", source)
    if not isinstance(traffic, dict) or not isinstance(slo, dict):
        raise PlannerError(f"{source}: traffic_profile and slo_targets must be objects")
    model = _text(_get(doc, "model_id", source), "model_id", source)
    gpu_type = _text(_get(gpu_config, "gpu_type", source), "gpu_config.gpu_type", source)
    tp = int(_number(gpu_config.get("tensor_parallel", 1), "gpu_config.tensor_parallel", source, 1, 64, True))
    replicas = int(_number(gpu_config.get("replicas", 1), "gpu_config.replicas", source, 1, MAX_REPLICAS, True))
    gpu, preset = preset_for(gpu_type, model, tp, source)
    percentile = slo.get("percentile", "p95")
    if percentile not in PERCENTILES:
        raise PlannerError(f"{source}: slo_targets.percentile {str(percentile)[:20]!r} is not one rushhour judges "
                           f"({', '.join(PERCENTILES)})")
    e2e = slo.get("e2e_p95_target_ms")
    use_case = (doc.get("intent") or {}).get("use_case") if isinstance(doc.get("intent"), dict) else None
    predicted = {k: float(v) for k in ("predicted_ttft_p95_ms", "predicted_itl_p95_ms", "predicted_e2e_p95_ms",
                                       "predicted_throughput_qps")
                 if isinstance(v := doc.get(k), int | float) and not isinstance(v, bool) and math.isfinite(v)}
    return Recommendation(
        source=source, model=model, gpu=gpu, tensor_parallel=tp, replicas=replicas, preset=preset,
        prompt_tokens=int(_number(_get(traffic, "prompt_tokens", source), "traffic_profile.prompt_tokens", source,
                                  1, MAX_TOKENS, True)),
        output_tokens=int(_number(_get(traffic, "output_tokens", source), "traffic_profile.output_tokens", source,
                                  1, MAX_TOKENS, True)),
        qps=_number(_get(traffic, "expected_qps", source), "traffic_profile.expected_qps", source, 0.001, MAX_QPS),
        percentile=str(percentile),
        ttft_ms=_number(_get(slo, "ttft_p95_target_ms", source), "slo_targets.ttft_p95_target_ms", source, 1, 1e7),
        itl_ms=_number(_get(slo, "itl_p95_target_ms", source), "slo_targets.itl_p95_target_ms", source, 0.1, 1e6),
        e2e_ms=None if e2e is None else _number(e2e, "slo_targets.e2e_p95_target_ms", source, 1, 1e8),
        use_case=use_case if isinstance(use_case, str) and len(use_case) <= 80 else "unknown", predicted=predicted,
    )


def _chat_slo(rec: Recommendation) -> dict[str, Any]:
    # the planner's ITL target is per output token: rushhour's per-request time per output token (tpot_ms);
    # its E2E target has no rushhour check and is left unjudged (said in the plan's notes)
    return {"ttft_ms": {rec.percentile: rec.ttft_ms}, "tpot_ms": {rec.percentile: rec.itl_ms},
            "max_drop_rate": 0.01}


def _chat(rec: Recommendation, tier: str) -> dict[str, Any]:
    # GuideLLM's profile is single requests of fixed sizes at a Poisson rate: one turn, no system prompt
    return {"kind": "chat", "name": "chat", "tier": tier, "arrival": {"process": "poisson", "rate": rec.qps},
            "turns": 1, "system_prompt_tokens": 0, "prompt_tokens": rec.prompt_tokens,
            "output_tokens": rec.output_tokens, "max_concurrent_sessions": 5000}


def _base(rec: Recommendation, name: str, seed: int) -> dict[str, Any]:
    return {"name": name, "description": f"from {Path(rec.source).name}: {rec.model} on {rec.replicas} × {rec.gpu} "
            f"(TP {rec.tensor_parallel}) as preset {rec.preset}", "seed": seed,
            "target": {"url": "testbed", "profile": "llm-d",
                       "testbed": {"preset": rec.preset, "replicas": rec.replicas}},
            "calibration": {"probes": 0}, "drain_s": 30}


def profile_scenario(rec: Recommendation, *, seed: int = 1, duration_s: float = 120.0) -> dict[str, Any]:
    """The planner's own claim as a scenario: its traffic profile alone, one tier, its SLOs."""
    doc = _base(rec, "planner-profile", seed)
    doc["tiers"] = [{"name": "chat", "priority": 100, "slo": _chat_slo(rec)}]
    doc["personas"] = [_chat(rec, "chat")]
    doc["phases"] = [{"name": "steady", "duration": f"{duration_s:g}s"}]
    return doc


def mix_scenario(rec: Recommendation, *, seed: int = 1, duration_s: float = 120.0, peak: float = 2.0,
                 batch_agents: int | None = None) -> dict[str, Any]:
    """The same traffic under a tiered mix: chat at high priority with a peak, beside a low-priority agent swarm.

    Half the run is the planner's rate, half ``peak`` × it (chat only: the swarm stays as it is); the chat
    tier keeps the planner's SLOs over the whole run and over the peak alone. The swarm (rushhour's default
    coding agent, 10 per replica unless ``batch_agents``) is batch: it may wait, but no more than 5 % of its
    calls may be turned away by the stack's policy.
    """
    agents = rec.replicas * 10 if batch_agents is None else batch_agents
    doc = _base(rec, "planner-mix", seed)
    chat_slo = _chat_slo(rec)
    doc["tiers"] = [{"name": "chat", "priority": 100, "slo": {**chat_slo, "phases": {"peak": chat_slo}}}]
    doc["personas"] = [_chat(rec, "chat")]
    if agents > 0:
        doc["tiers"].append({"name": "batch", "priority": -1, "slo": {"max_drop_rate_by_class": {
            "queue_full": 0.05, "queue_timeout": 0.05, "shed": 0.05, "preempted": 0.05}}})
        doc["personas"].append({"kind": "agent_swarm", "name": "swarm", "tier": "batch", "agents": agents,
                                "ramp_s": min(20.0, duration_s / 4)})
    half = f"{duration_s / 2:g}s"
    doc["phases"] = [{"name": "steady", "duration": half, "rate_scale": 1.0, "agents_scale": 1.0},
                     {"name": "peak", "duration": half, "rate_scale": peak, "agents_scale": 1.0}]
    return doc
