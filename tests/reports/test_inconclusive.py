"""An inconclusive SLO check says why in words, never `?? 1/2` (terminal, gate output, Markdown)."""

from __future__ import annotations

from rich.console import Console

from rushhour.audit.summary import Summary, Verdict
from rushhour.reports import fmt, inconclusive, print_terminal, print_verdicts, render_markdown


def _short_of_samples(summary: Summary) -> Summary:
    """The realistic summary with interactive's TTFT p99 judged on 37 samples (a point p99 needs 100)."""
    tier = summary.tier("interactive")
    ttft = tier.latency.ttft_ms.model_copy(update={"n": 37, "lower_bound": []})
    tier = tier.model_copy(update={"latency": tier.latency.model_copy(update={"ttft_ms": ttft})})
    verdict = Verdict(tier="interactive", check="ttft_ms.p99", threshold=2000.0, observed=1500.0, bound=None,
                      judge="point", passed=False, inconclusive=True,
                      message="interactive ttft_ms.p99: inconclusive: 37 sample(s), p99 needs ≥ 100 to be estimated")
    tiers = [tier if t.name == "interactive" else t for t in summary.tiers]
    return summary.model_copy(update={"tiers": tiers, "verdicts": [verdict], "passed": False, "exit_code": 2})


def test_the_reason_is_said_in_words(summary: Summary) -> None:
    unsure = _short_of_samples(summary)
    expected = "interactive ttft_ms.p99 inconclusive: not enough samples for p99: 37 of 100 needed"
    assert inconclusive.lines(unsure)[0].startswith(expected)
    phases = [{"name": "warm-up", "start_s": 0.0, "end_s": 10.0}, {"name": "peak", "start_s": 10.0, "end_s": 47.0}]
    window = unsure.measurement.model_copy(update={"excluded_phases": ["warm-up"]})
    timed = unsure.model_copy(update={"run": unsure.run.model_copy(update={"phases": phases}), "measurement": window})
    # 37 samples in the 37 s measured (the warm-up left out): 100 need 100 s
    assert f"(about {fmt.secs(100.0)} of measured load at this rate, or a lower percentile)" in (
        inconclusive.lines(timed)[0])
    console = Console(record=True, width=200, color_system=None)
    print_terminal(unsure, console)
    print_verdicts(unsure, console)
    text = console.export_text()
    assert "??" not in text and "INCONCLUSIVE" in text
    assert text.count(expected) == 2, text  # under the tier table and under the gate's checks
    assert "not enough samples for p99: 37 of 100 needed" in render_markdown(unsure)


def test_a_censored_percentile_says_so(summary: Summary) -> None:
    unsure = _short_of_samples(summary)
    tier = unsure.tier("interactive")
    ttft = tier.latency.ttft_ms.model_copy(update={"n": 500, "censored": 40, "lower_bound": ["p99"], "p99": 1500.0})
    tier = tier.model_copy(update={"latency": tier.latency.model_copy(update={"ttft_ms": ttft})})
    unsure = unsure.model_copy(update={"tiers": [tier if t.name == "interactive" else t for t in unsure.tiers]})
    assert inconclusive.reason(unsure, unsure.verdicts[0]) == (
        "40 of 500 waits were cut off by the run's end, so p99 is only known to be ≥ 1.50 s")
