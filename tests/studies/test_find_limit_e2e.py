"""`--find-limit` end to end, the CLI as a process: in virtual time its bracket meets the steady-state
`sweep --search`'s on the same scenario (probes with a warm-up and a cool-down: cold probes read this testbed as
stronger than it is, docs/find-limit.md) in less load time; in real time it finds the testbed's limit in one short
run, and starts from a simulated first pass's bracket (`--find-limit-from`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import rushhour

from tests.studies.test_search_e2e import SCENARIO

pytestmark = pytest.mark.e2e
SIM_LIMIT = ("find_limit: {start: 1, factor: 2, max_scale: 8, step_s: 10, settle_s: 3, lag_s: 2, bisect: 3, "
             "hold_s: 40}\n")
REAL_LIMIT = ("find_limit: {start: 1, factor: 2, max_scale: 8, step_s: 4, settle_s: 1, lag_s: 2, bisect: 2, "
              "hold_s: 8, min_samples: 10}\n")
# the reference search's probes in real time (benchmarks/find_limit.py): each measures the steady state, a warm-up
# before its judged window and the load kept on after it (in virtual time 6 seeds of 6 agreed with 120-s runs)
SEARCH_WARMUP, SEARCH_STEP, SEARCH_COOLDOWN = "5s", "20s", "3s"


def scenario(tmp_path: Path, duration: str, limit: str = "") -> Path:
    """The search e2e's scenario (a tiny testbed replica), batch with an SLO of its own, phases as long as asked."""
    text = SCENARIO.replace("  - name: batch\n    priority: 0\n",
                            "  - name: batch\n    priority: 0\n    slo: {max_drop_rate: 0.5}\n")
    path = tmp_path / f"s{len(limit)}.yaml"
    path.write_text(text.replace("duration: 30s", f"duration: {duration}") + limit)
    return path


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``rushhour ARGS``, which must succeed without a traceback."""
    run = rushhour(*args, timeout=timeout, columns=None)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    return run


def found_in(out: Path) -> dict:
    (run_dir,) = out.iterdir()
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["stop_reason"] == "limit_found"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["find_limit"] == manifest["find_limit"]  # the audit carries the answer as run.json says
    return manifest["find_limit"]


def test_simulated_find_limit_agrees_with_the_search_in_less_load_time(tmp_path: Path) -> None:
    one = cli("simulate", str(scenario(tmp_path, "300s", SIM_LIMIT)), "--find-limit", "--out", str(tmp_path / "one"))
    found = found_in(tmp_path / "one")
    # the answer in every report: the terminal's lines and steps, Markdown's section, HTML's section
    assert "find-limit: highest sustainable load" in one.stdout and "the levels tried" in one.stdout
    (run_dir,) = (tmp_path / "one").iterdir()
    assert "### The limit (find-limit)" in (run_dir / "report.md").read_text()
    assert 'id="find-limit"' in (run_dir / "report.html").read_text()
    cli("sweep", str(scenario(tmp_path, "300s")), "--search", "--simulate", "--scale", "1..8", "--step-duration",
        "20s", "--warmup", "5s", "--cooldown", "3s", "--max-probes", "8", "--precision", "0.1",
        "--out", str(tmp_path / "search"))
    (root,) = (tmp_path / "search").glob("sweep-*")
    search = json.loads((root / "sweep.json").read_text())["search"]
    assert found["status"] == search["status"] == "within"
    # the two brackets hold a common load: the limit the one run found is where the search put it
    # (levels within 0.1 % are one level: the search's 3.667× and the one run's 3.668× are the same load)
    assert (found["low_scale"] < search["fail_scale"] * 0.999 and search["pass_scale"] < found["high_scale"] * 0.999), \
        (found, search)
    steps = {s["kind"] for s in found["steps"]}
    assert steps == {"ramp", "bisect", "hold"} and found["binding"]["tier"] in ("interactive", "batch")
    # load time, in virtual seconds (deterministic, not the busy machine's clock): the search's probes each ran
    # warm-up + step + cool-down + drain; the one run ended where its last step was decided
    one_s = max(s["window_s"][1] for s in found["steps"]) + found["settings"]["lag_s"]
    search_s = len(search["probes"]) * (5 + 20 + 3 + 2)
    assert one_s < search_s, (one_s, search_s)


def test_real_find_limit_on_the_testbed_in_one_short_run(tmp_path: Path) -> None:
    run = cli("run", str(scenario(tmp_path, "50s", REAL_LIMIT)), "--find-limit", "--out", str(tmp_path / "real"),
              timeout=240)
    assert "find-limit: load × 2" in run.stderr + run.stdout
    found = found_in(tmp_path / "real")
    assert found["status"] in ("within", "above_range") and found["low_scale"] is not None
    assert found["steps"][0]["scale"] == 1.0 and len(found["steps"]) >= 3
    assert all(s["sent"] > 0 for s in found["steps"])
    assert "find-limit" in (run.stdout + run.stderr) and "highest sustainable load" in run.stdout + run.stderr


def test_plan_find_limit_says_what_each_cluster_size_carries(tmp_path: Path) -> None:
    run = cli("plan", str(scenario(tmp_path, "300s", SIM_LIMIT)), "--find-limit", "--replicas", "1,2", "--out",
              str(tmp_path / "plan"))
    (root,) = (tmp_path / "plan").iterdir()
    rows = json.loads((root / "plan-limit.json").read_text())["rows"]
    one, two = (row["found"] for row in rows)
    assert one["status"] == two["status"] == "within" and "2 replica(s): highest sustainable load" in run.stdout
    # the second replica's ramp is scaled with it (2× the first level), and it carries more than the first alone
    assert two["steps"][0]["scale"] == 2 * one["steps"][0]["scale"] and two["low_rps"] > one["high_rps"]
    assert "| 2 | within |" in (root / "plan-limit.md").read_text()


def test_real_find_limit_starts_from_a_simulated_first_pass(tmp_path: Path) -> None:
    cli("simulate", str(scenario(tmp_path, "300s", SIM_LIMIT)), "--find-limit", "--no-report",
        "--out", str(tmp_path / "sim"))
    (sim_dir,) = (tmp_path / "sim").iterdir()
    prior = json.loads((sim_dir / "run.json").read_text())["find_limit"]
    assert prior["status"] == "within"
    run = cli("run", str(scenario(tmp_path, "50s", REAL_LIMIT)), "--find-limit", "--find-limit-from", str(sim_dir),
              "--out", str(tmp_path / "real"), timeout=240)
    assert "find-limit: starting from the prior" in run.stderr + run.stdout
    found = found_in(tmp_path / "real")
    assert found["prior"]["low"] == prior["low_scale"] and found["prior"]["source"] == str(sim_dir)
    steps = found["steps"]
    # the search starts at the prior's low; then its high when the low passed, else a step down
    assert steps[0]["scale"] == round(prior["low_scale"], 6)
    second = prior["high_scale"] if steps[0]["live"] == "pass" else None
    assert second is None or steps[1]["scale"] == round(second, 6)
    assert found["status"] in ("within", "above_range") and found["low_scale"] is not None
    assert all(s["sent"] > 0 for s in steps) and steps[-1]["kind"] == "hold"
    # a wrong prior costs steps, never the run: a folder without an answer is refused in one line, before any load
    bad = rushhour("run", str(scenario(tmp_path, "50s", REAL_LIMIT)), "--find-limit", "--find-limit-from",
                   str(tmp_path), "--out", str(tmp_path / "bad"), columns=None)
    assert bad.returncode == 2 and "not a readable run.json" in bad.stderr and not (tmp_path / "bad").exists()
