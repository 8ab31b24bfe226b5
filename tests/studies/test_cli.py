"""The capacity commands through a tiny typer app, on hand-built run folders (no load is sent)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from rushhour import capacity

from .helpers import summary, tier

app = typer.Typer()
app.command("compare")(capacity.compare)
app.command("sweep")(capacity.sweep)
app.command("study")(capacity.study)


def _run_dir(root: Path, name: str, seed: int, slow: float = 1.0, drops: int = 6) -> Path:
    """A run folder with request records and a summary.json newer than them."""
    run = root / name
    (run / "records").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    lines = []
    t = 0
    for tier_name, mu in (("interactive", 5.5), ("batch", 7.0)):
        for _ in range(400):
            t += int(rng.exponential(20e6))
            ttft = int(rng.lognormal(mu, 0.6) * slow * 1e6)
            lines.append({"kind": "request", "tier": tier_name, "status": 200, "complete": True, "sent_ns": t,
                          "first_token_ns": t + ttft, "done_ns": t + ttft + int(2e9 * slow)})
    (run / "records" / "h-1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (run / "run.json").write_text("{}")
    s = summary([tier("interactive", 100, 400, 0, 500.0), tier("batch", -1, 400, drops, 3000.0)], [],
                run_id=name, seed=seed)
    (run / "summary.json").write_text(s.model_dump_json(by_alias=True))
    return run


@pytest.fixture()
def runs(tmp_path: Path) -> dict[str, Path]:
    return {"base": _run_dir(tmp_path, "base", 1), "twin": _run_dir(tmp_path, "twin", 2),
            "slow": _run_dir(tmp_path, "slow", 3, slow=1.6), "drops": _run_dir(tmp_path, "drops", 4, drops=80)}


def test_compare_exit_codes(runs: dict[str, Path], tmp_path: Path) -> None:
    cli = CliRunner()
    ok = cli.invoke(app, ["compare", str(runs["base"]), str(runs["twin"]), "--fail-on-regression"])
    assert ok.exit_code == 0, ok.output
    assert "no regression" in ok.output
    html = tmp_path / "cmp.html"
    out_json = tmp_path / "cmp.json"
    bad = cli.invoke(app, ["compare", str(runs["base"]), str(runs["slow"]), str(runs["drops"]),
                           "--fail-on-regression", "--html", str(html), "--json", str(out_json)])
    assert bad.exit_code == 1, bad.output
    assert "REGRESSION" in bad.output
    page = html.read_text()
    assert "<!doctype html>" in page and "moving-block bootstrap" in page
    data = json.loads(out_json.read_text())
    assert data["schema"] == "rushhour.compare/1" and data["exit_code"] == 1
    assert [c["verdict"] for c in data["comparisons"]] == ["regression", "regression"]
    report_only = cli.invoke(app, ["compare", str(runs["base"]), str(runs["slow"])])
    assert report_only.exit_code == 0  # without --fail-on-regression a regression is reported, not fatal


def test_compare_invalid_input(tmp_path: Path, runs: dict[str, Path]) -> None:
    cli = CliRunner()
    assert cli.invoke(app, ["compare", str(runs["base"])]).exit_code == 2
    assert cli.invoke(app, ["compare", str(runs["base"]), str(tmp_path / "nope")]).exit_code == 2


def test_sweep_and_study_reject_bad_options() -> None:
    cli = CliRunner()
    assert cli.invoke(app, ["sweep", "demo", "--scale", "3..1"]).exit_code == 2
    assert cli.invoke(app, ["sweep", "demo", "--replicas", "0"]).exit_code == 2
    assert cli.invoke(app, ["sweep", "no-such-scenario"]).exit_code == 2
    assert cli.invoke(app, ["study", "--grid", "huge"]).exit_code == 2
