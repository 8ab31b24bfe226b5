"""`compare` tells two embedded-testbed runs apart by what the testbed was, never by its ephemeral port."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import rushhour

from rushhour.studies.compare import compare_pair, load_run

pytestmark = pytest.mark.e2e


SCENARIO = """\
name: ports
seed: 3
target: {url: testbed}
calibration: {probes: 0}
drain_s: 1
tiers:
  - {name: interactive, priority: 10}
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {process: constant, rate: 4},
     prompt_tokens: 50, output_tokens: 5, turns: 1}
phases:
  - {name: steady, duration: 3}
"""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("ports")
    (folder / "ports.yaml").write_text(SCENARIO)
    for _ in range(2):
        done = rushhour("run", "ports.yaml", "--no-report", "--out", "runs", cwd=folder, script=True)
        assert done.returncode == 0, done.stderr
    runs = sorted((folder / "runs").iterdir())
    assert len(runs) == 2
    return runs


def test_two_testbed_runs_on_other_ports_are_the_same_target(two_runs: list[Path]) -> None:
    base, cand = (load_run(run)[0] for run in two_runs)
    assert base.run.target != cand.run.target  # two ephemeral ports: what used to be "target changed"
    assert base.run.testbed == cand.run.testbed == "llm-d · tiny × 1"
    done = rushhour("compare", *map(str, two_runs), cwd=two_runs[0].parent, script=True)
    assert done.returncode == 0, done.stderr
    assert "changed" not in done.stdout + done.stderr


def test_another_testbed_preset_is_a_change(two_runs: list[Path]) -> None:
    (base, base_samples), (cand, cand_samples) = (load_run(run) for run in two_runs)
    other = cand.model_copy(update={"run": cand.run.model_copy(update={"testbed": "llm-d · h100-llama8b × 2"})})
    warnings = compare_pair(base, base_samples, other, cand_samples, n_boot=200).warnings
    assert any("testbed changed: 'llm-d · tiny × 1' → 'llm-d · h100-llama8b × 2'" in w for w in warnings), warnings
    url = cand.model_copy(update={"run": cand.run.model_copy(update={"testbed": None})})
    warnings = compare_pair(base, base_samples, url, cand_samples, n_boot=200).warnings
    assert any(f"target changed: 'testbed llm-d · tiny × 1' → '{cand.run.target}'" in w for w in warnings), warnings
