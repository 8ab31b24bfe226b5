"""`rushhour run --repeat N`: derived seeds, per-tier aggregates with t-intervals, gating on any run or the mean."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support import REPO, cli_command, cli_env, rushhour, write_scenario

from rushhour.records.manifest import read_manifest
from rushhour.reports.repeat import render_junit
from rushhour.studies.repeat import RepeatRun, aggregate, derive_seed, spread, t_quantile

from ..studies.helpers import summary, tier, verdicts_for
from .wf_helpers import machine_invalid


def test_seeds_are_derived_deterministically() -> None:
    seeds = [derive_seed(17, i) for i in range(1, 6)]
    assert seeds[0] == 17 and len(set(seeds)) == 5
    assert seeds == [derive_seed(17, i) for i in range(1, 6)]  # the same every time
    assert derive_seed(18, 2) != seeds[1]


def test_t_quantiles_and_spread() -> None:
    for df, want in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)):
        assert math.isclose(t_quantile(0.975, df), want, abs_tol=2e-3)
    s = spread([0.1, 0.2, 0.3])
    assert s.n == 3 and s.mean == pytest.approx(0.2) and s.sd == pytest.approx(0.1)
    assert s.low == pytest.approx(0.2 - 4.3027 * 0.1 / math.sqrt(3), abs=1e-3)
    assert spread([0.0, 0.01, 0.02], 0.0, 1.0).low == 0.0  # clipped at 0
    one = spread([5.0, None])
    assert one.n == 1 and one.mean == 5.0 and one.low is None and one.high is None
    assert spread([None, None]).mean is None


def _runs(codes: list[int]) -> list[RepeatRun]:
    return [RepeatRun(index=i + 1, seed=i, run_id=f"r{i}", folder=f"r{i}", exit_code=c, passed=c == 0,
                      valid=True, stop_reason="completed") for i, c in enumerate(codes)]


def test_aggregate_gates_on_any_run_or_on_the_aggregate() -> None:
    drops = [2, 4, 12]  # of 100: run 3 fails max_drop_rate 0.1 on its own
    sums = []
    for d in drops:
        t = tier("interactive", 100, 100, d, 800.0)
        sums.append(summary([t], verdicts_for(t, 1000.0, 0.1)))
    codes = [s.exit_code for s in sums]
    slos = {"interactive": ("point", 0.1, {"p99": 1000.0})}
    anyrun = aggregate(sums, _runs(codes), "s", 1, slos, "any")  # type: ignore[arg-type]
    (t,) = anyrun.tiers
    assert t.runs_passed == 2 and t.runs == 3 and t.drop_rate.mean == pytest.approx(0.06)
    assert t.ttft_p99_ms.mean == pytest.approx(800.0) and t.ttft_p99_ms.sd == 0.0
    assert anyrun.runs_exit_code == 1 and anyrun.exit_code == 1
    assert anyrun.aggregate_passed  # the mean 6 % is under 10 %
    assert aggregate(sums, _runs(codes), "s", 1, slos, "aggregate").exit_code == 0  # type: ignore[arg-type]
    assert aggregate(sums, _runs(codes), "s", 1, slos, "both").exit_code == 1  # type: ignore[arg-type]
    # judged on the bound: the t-interval's upper end (6 % + 4.30 · 5.3 % / √3 ≈ 19 %) is over 10 %
    bound = aggregate(sums, _runs(codes), "s", 1, {"interactive": ("bound", 0.1, {})}, "aggregate")  # type: ignore[arg-type]
    assert not bound.aggregate_passed and bound.exit_code == 1
    assert "upper 95 % bound" in bound.tiers[0].checks[0].message
    # a run that could not measure (invalid, or aborted early) leaves the aggregate no pass to give
    broken = _runs(codes)
    broken[0].valid = False
    assert aggregate(sums, broken, "s", 1, slos, "aggregate").exit_code == 2  # type: ignore[arg-type]
    aborted = _runs(codes)
    aborted[1].stop_reason = "aborted_hopeless_slo"
    assert aggregate(sums, aborted, "s", 1, slos, "aggregate").exit_code == 2  # type: ignore[arg-type]
    # no SLO to aggregate: a gate on the aggregate cannot pass
    assert aggregate(sums, _runs(codes), "s", 1, {}, "aggregate").exit_code == 2
    # JUnit: one case per run (run 3 failed its gate) and one per aggregate check (failed on the bound)
    root = ET.fromstring(render_junit(bound))
    runs, agg = root.findall("testsuite")
    assert runs.get("tests") == "3" and runs.get("failures") == "1"
    assert agg.get("tests") == "1" and agg.get("failures") == "1"


def test_the_html_page_shows_every_run_the_mean_and_its_interval(tmp_path: Path) -> None:
    """``repeat.html`` (there was no page for a repeat): per tier per run figures, the aggregate's interval."""
    import re

    from rushhour.reports.repeat import render_repeat_html

    sums = []
    for d, p99 in ((2, 700.0), (4, 800.0), (12, 900.0)):
        t = tier("interactive", 100, 100, d, p99)
        sums.append(summary([t], verdicts_for(t, 1000.0, 0.1)))
    agg = aggregate(sums, _runs([s.exit_code for s in sums]), "s", 1,
                    {"interactive": ("bound", 0.1, {})}, "aggregate")  # type: ignore[arg-type]
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "report.html").write_text("run 2's report")
    html = render_repeat_html(agg, tmp_path)
    assert 'id="badge">FAIL' in html and "aggregate FAIL (interactive max_drop_rate)" in html
    assert "<script" not in html and "http" not in html.replace("http-equiv", "")  # self-contained
    per_run = html[html.index('id="per-run"'):]
    assert per_run.count("<tr class=") == 3 and "12 %" in per_run and "900 ms" in per_run
    assert agg.tiers[0].passed == [True, True, False] and per_run.count('<tr class="fail">') == 1
    # only a run whose report exists is linked
    assert 'href="r1/report.html"' in html and 'href="r0/report.html"' not in html
    # every run a dot, the interval a band, the mean a line — in each of the three charts
    assert html.count('class="band"') == 3 and html.count('class="mean"') == 3
    assert len(re.findall(r"<title>interactive run \d: ", html)) == 9
    assert "6.0 % [0.0 %–19.1 %]" in html  # mean not served and its 95 % t-interval


@pytest.mark.e2e
def test_repeat_runs_aggregates_and_gates(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, seconds=5, seed=11)
    res = rushhour("run", str(path), "--repeat", "3", "--out", str(tmp_path / "runs"), "--no-report")
    (folder,) = (tmp_path / "runs").iterdir()
    data = json.loads((folder / "repeat.json").read_text())
    # a run a loaded machine's generator lag made invalid is not judged: it does not pass, and gating on
    # any run then exits 2 (the audit's verdict on the machine); every other run must pass
    lagged = [run["folder"] for run in data["runs"] if machine_invalid(folder / run["folder"])]
    passed, expected = 3 - len(lagged), 2 if lagged else 0
    assert res.returncode == expected, res.stdout + res.stderr
    assert [r["seed"] for r in data["runs"]] == [derive_seed(11, i) for i in (1, 2, 3)]
    for run in data["runs"]:  # each run folder ran with its own seed and was audited
        assert read_manifest(folder / run["folder"]).seed == run["seed"]
        assert (folder / run["folder"] / "summary.json").is_file()
    (t,) = data["tiers"]
    assert t["runs"] == 3 and t["runs_passed"] == passed, (t, lagged)
    assert t["ttft_p50_ms"]["n"] == 3 and t["ttft_p50_ms"]["low"] is not None
    assert f"{passed} of 3 runs passed" in (folder / "repeat.md").read_text()
    assert f"HTML report: {folder / 'repeat.html'}" in res.stdout
    assert f"{passed} of 3 runs passed" in (folder / "repeat.html").read_text()
    gate = rushhour("gate", str(folder), "--junit", str(tmp_path / "junit.xml"))
    assert gate.returncode == expected and f"{passed} of 3 runs passed" in gate.stdout, gate.stdout
    assert ET.parse(tmp_path / "junit.xml").getroot().find("testsuite").get("tests") == "3"  # type: ignore[union-attr]
    refused = rushhour("gate", str(folder), "--judge", "bound")
    assert refused.returncode == 2 and "gate each run folder" in refused.stderr


@pytest.mark.e2e
def test_repeat_with_a_failing_slo_fails(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, seconds=5, ttft_p50_ms=1)
    res = rushhour("run", str(path), "--repeat", "2", "--repeat-gate", "aggregate", "--out", str(tmp_path / "runs"),
                   "--no-report", "--gate", "--junit", str(tmp_path / "run-junit.xml"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "aggregate FAIL (interactive ttft_ms.p50)" in res.stdout
    (folder,) = (tmp_path / "runs").iterdir()
    gate = rushhour("gate", str(folder), "--junit", str(tmp_path / "gate-junit.xml"))
    assert gate.returncode == 1 and "0 of 2 runs passed" in gate.stdout
    # `run --gate`'s JUnit is the repeat's, as `rushhour gate` writes it on the folder
    assert (tmp_path / "run-junit.xml").read_text() == (tmp_path / "gate-junit.xml").read_text()


@pytest.mark.e2e
def test_an_interrupted_repeat_keeps_what_it_ran(tmp_path: Path) -> None:
    """Ctrl-C during the second run: exit 130, repeat.json aggregates the runs done and never passes."""
    import signal
    import subprocess
    import time

    path = write_scenario(tmp_path, seconds=8)
    proc = subprocess.Popen([*cli_command(), "run", str(path), "--repeat", "3", "--out", str(tmp_path / "runs"),
                             "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                            env=cli_env())
    deadline = time.monotonic() + 300
    second: list[Path] = []
    while time.monotonic() < deadline and not second:
        time.sleep(0.5)
        folders = sorted(p for p in (tmp_path / "runs").glob("repeat-*/*") if p.is_dir())  # run ids: by time
        second = [p for p in folders if (p / "records").is_dir()][1:]
    assert second, "the second run never started"
    # inside its load: a request recorded (a fixed sleep after the folder appeared was still before the load
    # on a loaded machine: no shard, exit 2 instead of 130)
    while time.monotonic() < deadline and not any(b'"kind":"request"' in p.read_bytes()
                                                  for p in (second[0] / "records").glob("*.jsonl")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out + err
    (folder,) = (tmp_path / "runs").iterdir()
    data = json.loads((folder / "repeat.json").read_text())
    assert data["exit_code"] == 130 and 1 <= len(data["runs"]) <= 2
    assert data["runs"][0]["stop_reason"] == "completed"


def test_a_repeat_interrupted_while_a_run_starts_exits_130(tmp_path: Path) -> None:
    """Ctrl-C while the second run's testbed starts (nothing recorded yet): the repeat was interrupted, so
    130 with the first run aggregated — it used to try to audit the empty run and exit 2 ("has no shards")."""
    import signal
    import subprocess
    import time

    path = write_scenario(tmp_path, seconds=4)
    proc = subprocess.Popen([*cli_command(), "run", str(path), "--repeat", "3", "--out", str(tmp_path / "runs"),
                             "--no-report"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                            env=cli_env())
    deadline = time.monotonic() + 300
    said = ""
    # the second run's testbed is starting: its folder exists, nothing is recorded yet
    while time.monotonic() < deadline and "starting the testbed" not in said.partition("repeat 2/3")[2]:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line, said
        said += line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, said + out + err
    (folder,) = (tmp_path / "runs").iterdir()
    data = json.loads((folder / "repeat.json").read_text())
    assert data["exit_code"] == 130 and [r["index"] for r in data["runs"]] in ([1], [1, 2])


def test_a_bad_repeat_gate_is_refused_even_in_a_dry_run() -> None:
    from typer.testing import CliRunner

    from rushhour.cli import app

    res = CliRunner().invoke(app, ["run", "ci-smoke", "--repeat", "2", "--repeat-gate", "bogus", "--dry-run"])
    assert res.exit_code == 2 and "--repeat-gate takes any, aggregate or both" in res.output
