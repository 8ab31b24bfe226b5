"""The simulator's tracked engine views (saturation kept per replica) answer as a full rescore would, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pinned import LLMD_CONFIG, SCENARIO

from rushhour.sim.cluster import SimEngine
from rushhour.sim.run import SimOptions, simulate

# a replica down for a while (saturation over the others, then all again) on a stack with decode jumps off
FAULTS = """    faults:
      - {kind: replica_down, replica: 1, at_s: 6, duration_s: 3}
"""


@pytest.mark.parametrize("case", ["llm-d", "llm-d-faults", "vllm"])
def test_tracked_saturation_is_a_full_rescore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Every answer of the tracked saturation during a run equals the full rescore at that instant."""
    profile = case.removesuffix("-faults")
    config = LLMD_CONFIG if profile == "llm-d" else ""
    text = SCENARIO.format(profile=profile, config=config)
    if case.endswith("-faults"):
        text = text.replace("    replicas: 2\n", "    replicas: 2\n" + FAULTS)
    tracked, gate = SimEngine.saturation, SimEngine.saturated
    seen = {"calls": 0, "jumping": 0, "down": 0, "gated": 0, "shortcut": 0}

    def checked(self: SimEngine) -> float:
        got = tracked(self)
        assert got == self._saturation()
        seen["calls"] += 1
        seen["jumping"] += bool(self._jumping)
        seen["down"] += len(self._up) < len(self.replicas)
        return got

    def checked_gate(self: SimEngine, threshold: float) -> bool:
        now = self.clock.now_ns()
        due = bool(self._deadlines) and self._deadlines[0][0] <= now  # jumps' scores fallen due, not yet scored
        got = gate(self, threshold)
        assert got == (self._saturation() >= threshold)
        seen["calls"] += 1
        seen["jumping"] += bool(self._jumping)
        seen["down"] += len(self._up) < len(self.replicas)
        seen["gated"] += got
        seen["shortcut"] += got and due and bool(self._deadlines) and self._deadlines[0][0] <= now
        return got

    monkeypatch.setattr(SimEngine, "saturation", checked)
    monkeypatch.setattr(SimEngine, "saturated", checked_gate)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    simulate(str(path), SimOptions(out_dir=tmp_path / "out"))
    assert seen["calls"] > 500
    if case == "llm-d":
        assert seen["jumping"] > 100  # lazy decode steps were scored from their jumps
        assert seen["shortcut"] > 50  # gated without scoring the jumps fallen due
    if case == "llm-d-faults":
        assert seen["down"] > 100
