"""The presets-vs-published table in docs/capacity.md holds the benchmark's data and marks every shipped preset."""

from __future__ import annotations

from pathlib import Path

from support import load_script

from rushhour.testbed.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("benchmarks/presets_vs_published.py")


def test_doc_table_matches_the_script_and_marks_every_preset():
    bench = _bench()
    text = (ROOT / "docs/capacity.md").read_text()
    assert bench.doc_problems(text, sorted(PRESETS)) == []
    assert {p.preset for p in bench.POINTS} <= set(PRESETS)  # no point names a preset that does not exist
    # the check can fail: a published figure edited in the doc, a preset the doc does not mark
    point = bench.POINTS[1]
    metric, value = next(iter(point.published.items()))
    doctored = text.replace(f"| {bench._fmt(metric, value)} |", "| 1.0 ms |", 1)
    assert any(point.preset in p for p in bench.doc_problems(doctored, sorted(PRESETS)))
    assert any("'h200-new'" in p for p in bench.doc_problems(text, [*sorted(PRESETS), "h200-new"]))
