"""An INVALID run and a generator WARNING name their cause and remedy in every report: terminal, Markdown, HTML."""

from __future__ import annotations

from rich.console import Console

from rushhour.audit.summary import Summary
from rushhour.reports import print_verdicts, render_html, render_markdown

CAUSE = ("cause: the Locust process (pid 4242) lagged most (loop lag up to 480 ms, 6 second(s) over 50 ms); "
         "host load average up to 6.3 on 2 core(s); its CPU 35 % of a core on average, max 92 %; the embedded "
         "testbed runs on the same cores as the generator. Remedy: fewer users per process: `--processes 2` "
         "(2 core(s) here); the testbed on another host (`rushhour serve` there, then `--target URL`).")
WARNING = ("generator loop lag > 50 ms in 6 of 20 busy second(s), 6.0 s in a row at most (limit 3.0 s in a row "
           "or 10 % of them): it moved no send or first-token time beyond the tolerances")


def _with(summary: Summary, **validity: object) -> Summary:
    return summary.model_copy(update={"validity": summary.validity.model_copy(update=validity)})


def _terminal(summary: Summary) -> str:
    console = Console(width=160, record=True, color_system=None)
    print_verdicts(summary, console)
    return console.export_text()


def test_a_warning_is_shown_with_its_cause_and_the_run_stays_valid(summary: Summary) -> None:
    warned = _with(summary, warnings=[WARNING], cause=CAUSE)
    md = render_markdown(warned)
    assert "> [!WARNING]" in md and "moved no send or first-token time" in md and "pid 4242" in md
    assert "[!CAUTION]" not in md
    html = render_html(warned, None)
    assert 'id="warning-banner"' in html and 'id="invalid-banner"' not in html
    assert "pid 4242" in html and "--processes 2" in html
    text = _terminal(warned)
    assert "warning: generator loop lag" in text and "pid 4242" in text


def test_an_invalid_run_names_its_cause_and_remedy(summary: Summary) -> None:
    reason = "5 of 5 request(s) left more than 100 ms after their intended time: the generator fell behind"
    invalid = _with(summary, valid=False, reasons=[reason], cause=CAUSE)
    md = render_markdown(invalid)
    assert "[!CAUTION]" in md and "pid 4242" in md and "Remedy:" in md
    html = render_html(invalid, None)
    assert 'id="invalid-cause"' in html and "pid 4242" in html
    text = _terminal(invalid)
    assert "invalid: 5 of 5" in text and "Remedy:" in text


def test_no_cause_no_banner(summary: Summary) -> None:
    assert summary.validity.valid and not summary.validity.warnings
    html = render_html(summary, None)
    assert 'id="warning-banner"' not in html and 'id="validity-cause"' not in html
