"""`rushhour gate` with its own SLOs judges without rewriting the run's summary.json."""

from __future__ import annotations

import sys
from pathlib import Path

from support import rushhour

from rushhour.audit import run_audit


def test_gate_with_an_slo_file_leaves_the_summary_alone(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
    from helpers import MS, RunBuilder, S  # tests/audit/helpers.py

    # p90: 20 samples judge a p90 (≥ 10), not a p99 (≥ 100: inconclusive, exit 2)
    b = RunBuilder(tmp_path, tiers=[{"name": "gold", "priority": 1, "slo": {"ttft_ms": {"p90": 500}}}],
                   duration_s=20)
    for i in range(20):
        b.request(tier="gold", tenant="g", persona="chat-gold", sent_ns=i * S, first_token_ns=i * S + 100 * MS)
    run = b.close()
    run_audit(run)
    before = (run / "summary.json").read_bytes()
    slo = tmp_path / "slo.yaml"
    slo.write_text("tiers:\n  gold:\n    ttft_ms: {p90: 50}\n")
    gate = rushhour("gate", str(run), "--slo", str(slo), timeout=120)
    assert gate.returncode == 1, gate.stdout + gate.stderr  # 100 ms > 50 ms
    assert (run / "summary.json").read_bytes() == before
    plain = rushhour("gate", str(run), timeout=120)
    assert plain.returncode == 0, plain.stdout + plain.stderr
