"""The page of a ``rushhour calibrate``: what was probed, the fitted coefficients with intervals, the held-out error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rushhour.reports.fmt import speed_change

MEANING = {
    "base_s": "time of every engine step",
    "per_seq_s": "per decoding sequence in the step",
    "per_kv_token_s": "per KV-cache token in use",
    "prefill_per_token_s": "per prompt token computed in the step",
    "prefill_step_s": "once for a step holding any prompt chunk",
}


def _num(value: object) -> str:
    return "—" if value is None else f"{float(value):.4g}"  # type: ignore[arg-type]


def render_calibration(report: Mapping[str, Any], preset_file: str | None) -> str:
    """The calibration's Markdown page (ends with a newline)."""
    fit = report.get("fit") or {}
    refused = report.get("refused")
    out = [f"# rushhour calibrate · {report.get('engine')} at {report.get('server')}", ""]
    if refused:
        out += ["> [!CAUTION]", f"> **No preset written.** {refused}.",
                "> The simulator's replica model cannot stand for this engine as measured; its answers would "
                "mislead.", ""]
    else:
        out += [f"Preset written: `{preset_file}` (use it: `rushhour plan SCENARIO --preset {preset_file}`).", ""]
    out += [f"- date: {report.get('date')}; model `{report.get('model')}`",
            f"- probes: {report.get('probes')} ({len(report.get('heldout_probes') or [])} held out: "
            f"{', '.join(report.get('heldout_probes') or []) or 'none'}); {report.get('requests')} requests, "
            f"{report.get('served')} served, {report.get('engine_timing')} with the engine's own timing",
            f"- probe runs (audited, sealed): {', '.join(f'`{r}`' for r in report.get('runs') or [])}", ""]
    if fit:
        out += ["## Step time: step_s = Σ coefficient × term", "",
                "| coefficient | term | value | 95 % interval (bootstrap) |", "|---|---|---:|---|"]
        for name, value in (fit.get("coefficients") or {}).items():
            low, high = (fit.get("intervals") or {}).get(name, (None, None))
            pinned = " (held at 0: the data put it below)" if name in (fit.get("pinned_zero") or []) else ""
            out.append(f"| `{name}` | {MEANING.get(name, '')} | {_num(value)}{pinned} | [{_num(low)}, {_num(high)}] |")
        out += ["", "## Error on held-out probes (never fitted on)", "",
                "| requests | n | MAPE | Pearson r |", "|---|---:|---:|---:|"]
        for kind in fit.get("kinds") or []:
            r = kind.get("pearson_r")
            out.append(f"| {kind['kind']} | {kind['n']} | {kind['mape']:.1%} | {'—' if r is None else f'{r:.3f}'} |")
        r_all = fit.get("pearson_r")
        out += [f"| all | {fit.get('heldout_n')} | {fit.get('mape', 0):.1%} | "
                f"{'—' if r_all is None else f'{r_all:.3f}'} |", "",
                f"Fitted on {fit.get('train_n')} requests (their own error: MAPE {fit.get('train_mape', 0):.1%}).",
                "", "The engine's own repeat noise (requests of one probe, each against their mean, per step): "
                + ("unmeasured (no probe repeated)." if fit.get("noise_mape") is None else
                   f"MAPE {fit['noise_mape']:.1%}. A held-out error near it is the engine's noise, which no fit "
                   "removes; well above it, a misfit."), ""]
    out += [_drift(report.get("speed_drift")), ""]
    out += [f"Fitted on prompts up to {report.get('max_prompt_tokens')} tokens: a longer prompt is extrapolated.", "",
            "## Capacity", "", "| number | value | source |", "|---|---:|---|"]
    sources = report.get("sources") or {}
    for name, value in (report.get("capacity") or {}).items():
        out.append(f"| `{name}` | {value:,} | {sources.get(name, 'default')} |")
    overhead = report.get("first_token_overhead_ms")
    out += ["", "## Outside the engine's steps", "",
            "- The server's time before a first token outside its engine steps (HTTP, tokenising, hand-offs): "
            + ("unmeasured; the preset has none (`front_end_s: 0`), so the simulator's TTFT is short by it." if
               overhead is None else
               f"median {overhead:.1f} ms per request sent alone (client TTFT − engine queue − engine prefill), "
               "the preset's `front_end_s`. " + _spread(report.get("front_end_quantiles_s") or [])
               + " A server whose front end slows with load or prompt size is not modelled."), ""]
    front = report.get("front_end") or {}
    cpu, interval, shares = front.get("cpu_s"), front.get("interval"), front.get("shares_core")
    if cpu is None:
        out += [f"- The front end's CPU per request: unmeasured ({front.get('evidence') or 'not probed'}); the "
                "preset has none (`front_end_cpu_s: 0`).", ""]
    else:
        span = "" if not interval else f" [{1000 * interval[0]:.2f}, {1000 * interval[1]:.2f}]"
        out += [f"- The front end's CPU per request (its `process_cpu_seconds_total`, one-token requests): "
                f"{1000 * cpu:.2f} ms{span}. {front.get('evidence')}.",
                "- " + ("So the preset's `front_end_cpu_s` is that CPU: a request arriving while the engine is "
                        "busy, served or refused, lengthens its next step by it." if shares else
                        "So the preset has no `front_end_cpu_s`: " + (
                            "the front end was not seen to slow the engine." if shares is False else
                            "whether it slows the engine is unmeasured, and it is not modelled.")),
                "- Its per-step and per-token work (detokenising, streaming) is inside the engine's measured step "
                "times, so inside the fitted step terms above.", ""]
    return "\n".join(out)


def _spread(quantiles: list[float]) -> str:
    """What the simulator does with the front end's time: draw it from its measured quantiles, or take the median."""
    if not quantiles:
        return ("Too few requests alone to measure its spread: the simulator delays each request's arrival at the "
                "engine by the median.")
    ms = [1000 * v for v in quantiles]
    return (f"Its spread over those requests: {ms[0]:.1f} ms at least, {ms[1]:.1f}–{ms[-2]:.1f} ms from 10 % to "
            f"90 %, {ms[-1]:.1f} ms at most (`front_end_quantiles_s`): the simulator draws each request's delay "
            "before the engine from it.")


def _drift(drift: list[float] | tuple[float, int] | None) -> str:
    """The host's drift within the calibration, said with what it means for a later run."""
    if not drift:
        return ("The engine's speed across the calibration: unmeasured (the decode ladder ran once, `--quick`): "
                "how much the host itself drifts is unknown.")
    return (f"The engine's speed across the calibration: the decode ladder's second pass ran "
            f"{speed_change(drift[0])} than its first (median over {int(drift[1])} probes run twice). That is the "
            "host's own drift, not the model's: a run predicted later is off by about as much again whatever the "
            "fit, so on a host that drifts more than the targets allow, calibrate close to the runs you plan from.")

