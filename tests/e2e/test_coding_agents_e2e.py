"""The library's coding-agents scenario, run for real (shortened) against the embedded testbed: every feature it
advertises shows up on the wire, in the audit, in the report and in the gate.

The scenario is the library file itself; the test only adds the testbed's request log (to read what was sent),
asks for one calibration probe per size instead of five, and shortens the load with ``--duration`` like a user
would. Figures that depend on the machine's speed (how many users gave up, whether the TTFT SLO held) are
checked for consistency, not for a value: the gate's exit code is derived here from the summary's figures.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import rushhour

from rushhour.audit.summary import Summary
from rushhour.loadgen.datasets import read_dataset
from rushhour.records.record import read_shard, shard_paths
from rushhour.reports import sentences
from rushhour.scenarios import Scenario, load_scenario
from rushhour.scenarios.distributions import BUNDLED_DATASETS
from rushhour.scenarios.model import ChatPersona

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "scenarios" / "library" / "coding-agents.yaml"
TOOLS = {"read_file", "search_code", "edit_file", "run_command"}
DURATION = "15s"  # the library's 60 s main phase, scaled down (its 10 s drain stays as shipped)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected_gate(summary: Summary, scenario: Scenario) -> int:
    """The exit code the scenario's SLOs imply for these figures, judged here from the summary's numbers (point
    estimates, as the scenario does not ask for bound judging): 2 invalid, 1 a check failed, 2 inconclusive, 0."""
    tiers = {t.name: t for t in summary.tiers}
    slos = {t.name: t.slo for t in scenario.tiers}
    ttft_slo = slos["interactive"].ttft_ms
    assert ttft_slo is not None and ttft_slo.model_dump(exclude_none=True) == {"p90": 3000.0}
    assert slos["interactive"].max_abandon_rate == 0.10
    assert slos["agents"].max_drop_rate == 0.2 and slos["agents"].ttft_ms is None
    assert {s.judge for s in slos.values()} == {"point"}
    failed: list[str] = []
    inconclusive: list[str] = []
    ttft = tiers["interactive"].latency.ttft_ms
    if ttft.p90 is None:  # no sample at all: fail closed
        failed.append("interactive ttft p90 (no samples)")
    elif "p90" in ttft.lower_bound:  # censored waits: only a lower bound, which fails only when already too high
        (failed if ttft.p90 > 3000 else inconclusive).append("interactive ttft p90 (a lower bound)")
    elif ttft.n < 10:  # a p90 needs at least 10 samples to be estimated
        inconclusive.append("interactive ttft p90 (too few samples)")
    elif ttft.p90 > 3000:
        failed.append("interactive ttft p90")
    chat = next(p for p in tiers["interactive"].personas if p.persona == "chat-users")
    assert chat.abandon_rate is not None and chat.abandon_rate.n > 0
    if chat.abandon_rate.value is not None and chat.abandon_rate.value > 0.10:
        failed.append("chat-users abandon rate")
    drop = tiers["agents"].drop_rate
    if drop.value is None or drop.value > 0.2:
        failed.append("agents drop rate")
    print("gate inputs:", {"valid": summary.validity.valid, "reasons": summary.validity.reasons,
                           "ttft_p90_ms": ttft.p90, "ttft_n": ttft.n, "abandon_rate": chat.abandon_rate.value,
                           "agents_drop_rate": drop.value, "failed": failed, "inconclusive": inconclusive})
    if not summary.validity.valid:
        return 2
    return 1 if failed else 2 if inconclusive else 0


def test_library_coding_agents_scenario_end_to_end(tmp_path: Path) -> None:
    # the library file with the testbed's request log switched on and one calibration probe per size instead of
    # five (ten probes of 16 tokens on the simulated L4 take ~15 s of idle time): nothing else changed
    data = yaml.safe_load(LIBRARY.read_text())
    log = tmp_path / "requests.jsonl"
    data["target"]["testbed"]["config"]["request_log"] = str(log)
    data["calibration"] = {"probes": 1}
    derived = tmp_path / "coding-agents.yaml"
    derived.write_text(yaml.safe_dump(data, sort_keys=False))
    scenario, shipped = load_scenario(derived), load_scenario(LIBRARY)
    mine, theirs = scenario.model_dump(exclude={"calibration"}), shipped.model_dump(exclude={"calibration"})
    assert mine["target"]["testbed"]["config"].pop("request_log") == str(log)
    assert "request_log" not in theirs["target"]["testbed"]["config"]
    assert mine == theirs

    run = rushhour("run", str(derived), "--duration", DURATION, "--out", str(tmp_path / "runs"), timeout=150)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if (p / "summary.json").is_file()]
    summary = Summary.model_validate_json((run_dir / "summary.json").read_text())
    tiers = {t.name: t for t in summary.tiers}
    lines = [line for p in shard_paths(run_dir) for line in read_shard(p).lines]
    records = [r for r in lines if r["kind"] == "request" and not r["not_sent"]]
    coders = [r for r in records if r["persona"] == "coders"]
    chat = [r for r in records if r["persona"] == "chat-users"]
    assert coders and chat and all(r["tier"] == "agents" for r in coders)
    assert all(r["tier"] == "interactive" for r in chat)
    ledger = {row["request_id"]: row for row in _jsonl(run_dir / "testbed-ledger.jsonl")}
    bodies = {row["request_id"]: row["body"] for row in _jsonl(log)}
    assert {r["request_id"] for r in records} <= set(bodies)  # the testbed logged every request it got

    # --- agents: every call offered the four tools, the testbed answered with tool calls, sub-agents spawned
    assert all(r["tools_offered"] for r in coders) and not any(r["tools_offered"] for r in chat)
    for r in coders:
        assert {t["function"]["name"] for t in bodies[r["request_id"]]["tools"]} == TOOLS
    assert not any("tools" in bodies[r["request_id"]] for r in chat)
    served = [r for r in coders if 200 <= r["status"] < 300 and r["complete"] and not r["in_band_error"]
              and not r["abandoned"]]  # the audit's "served" (audit/classify.py)
    called = [r for r in served if r["tool_call"]]
    assert called and {r["tool_call"] for r in called} <= TOOLS
    for r in called:  # the client read the call the testbed streamed (its ledger: the call's id)
        assert ledger[r["request_id"]]["tool_call"]
    # the next step carries a call the testbed made and the tool's result for it
    call_ids = {ledger[r["request_id"]]["tool_call"] for r in called}
    results = [m for r in coders for m in bodies[r["request_id"]]["messages"] if m["role"] == "tool"]
    assert results and {m["tool_call_id"] for m in results} <= call_ids
    spawns: dict[str, set[str]] = defaultdict(set)
    for r in coders:
        if r["parent_id"]:
            spawns[r["parent_id"]].add(r["logical_id"])
    assert spawns, "no sub-agent was spawned"
    by_logical = {r["logical_id"]: r for r in coders}
    for parent_id, subs in spawns.items():  # a spawn is a call of the same task; its sub-agents are in that task
        parent = by_logical[parent_id]
        assert parent["parent_id"] == "" and parent["task_id"]
        assert {by_logical[s]["task_id"] for s in subs} == {parent["task_id"]}
    agents = tiers["agents"].agents
    assert agents is not None and tiers["interactive"].agents is None
    every = [r for r in lines if r["kind"] == "request" and r["persona"] == "coders"]  # not_sent ones too
    assert agents.requests_with_tools == len({r["logical_id"] for r in every})
    assert agents.served_with_tools == len({r["logical_id"] for r in served})
    assert agents.tool_call_answers == len({r["logical_id"] for r in called}) > 0
    assert set(agents.tool_calls_by_name) <= TOOLS and sum(agents.tool_calls_by_name.values()) == len(called)
    assert agents.subagent_spawns == len(spawns) > 0
    assert agents.subagent_requests == len({s for subs in spawns.values() for s in subs})
    share = agents.tool_call_answers / agents.served_with_tools
    if agents.served_with_tools >= 30:  # the scenario's 70 %, loosely (binomial spread, not a speed figure)
        assert 0.45 <= share <= 0.9, share
    tasks = [t for t in lines if t["kind"] == "task" and t["persona"] == "coders"]
    assert tasks and tiers["agents"].tasks is not None and tiers["agents"].tasks.n == len(tasks)

    # --- chat users: every prompt is a conversation of the shipped dataset, replayed turn by turn
    dialogs = read_dataset(BUNDLED_DATASETS / "chat-mini.jsonl")
    by_first = {d.turns[0].user: d for d in dialogs}
    matched: set[int] = set()
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in chat:
        sessions[r["session_id"]].append(r)
    for turns in sessions.values():
        for r in turns:
            messages = bodies[r["request_id"]]["messages"]
            assert messages[0]["role"] == "system"  # the persona's shared system prompt first
            dialog = by_first[messages[1]["content"]]  # the session replays one conversation of the dataset
            assert messages[-1] == {"role": "user", "content": dialog.turns[r["step"]].user}
            for k in range(r["step"]):  # the history: the dataset's own turns and replies, in order
                assert messages[2 + 2 * k] == {"role": "assistant", "content": dialog.turns[k].reply}
                assert messages[3 + 2 * k] == {"role": "user", "content": dialog.turns[k + 1].user}
            matched.add(dialog.row)
    assert len(sessions) >= 5 and len(matched) >= 3
    assert tiers["interactive"].sessions is not None

    # --- patience: the persona gives up after its patience; abandoned requests are counted, judged, re-asked
    persona = next(p for p in scenario.personas if p.name == "chat-users")
    assert isinstance(persona, ChatPersona) and persona.patience_s is not None and persona.on_abandon == "retry"
    interactive = tiers["interactive"]
    assert "abandoned" in interactive.by_class and not any(r["abandoned"] for r in coders)  # agents have none
    abandoned = [r for r in chat if r["abandoned"]]
    chat_summary = next(p for p in interactive.personas if p.persona == "chat-users")
    assert chat_summary.abandon_rate is not None and chat_summary.abandon_rate.n == chat_summary.drop_rate.n > 0
    assert interactive.by_class["abandoned"] == chat_summary.abandoned == len({r["logical_id"] for r in abandoned})
    assert chat_summary.abandon_rate.k == chat_summary.abandoned
    for r in abandoned:  # no first token within the user's patience; the testbed saw the client go away
        assert r["first_token_ns"] is None and ledger[r["request_id"]]["outcome"] == "cancelled"
        again = [x for x in chat if (x["session_id"], x["step"]) == (r["session_id"], r["step"])
                 and x["logical_id"] != r["logical_id"]]
        assert len(again) <= 1  # on_abandon: retry, once (abandon_retries defaults to 1)
    assert [v for v in summary.verdicts if v.check == "persona.chat-users.max_abandon_rate"]

    # --- the report: the "Agents on the wire" section with the agents tier's line and table row
    html = (run_dir / "report.html").read_text()
    assert "Agents on the wire: tools and sub-agents" in html
    section = html.split('id="agents-on-the-wire"')[1].split("</table>")[0]
    line = sentences.agents_line(tiers["agents"])
    assert "offered tools" in line and "answer(s) called a tool" in line and "spawned sub-agents" in line
    assert line in section and 'data-tier="agents"' in section and 'data-tier="interactive"' not in section

    # --- the gate: the exit code the scenario's three SLOs imply
    expected = _expected_gate(summary, scenario)
    checks = {(v.tier, v.check) for v in summary.verdicts}
    assert checks == {("interactive", "ttft_ms.p90"), ("interactive", "persona.chat-users.max_abandon_rate"),
                      ("agents", "max_drop_rate")}, checks
    gate = rushhour("gate", str(run_dir), timeout=120)
    assert "Traceback" not in gate.stderr
    assert gate.returncode == expected == summary.exit_code, gate.stdout[-3000:] + gate.stderr[-2000:]
    print("figures:", {"requests": len(records), "requests_with_tools": agents.requests_with_tools,
                       "tool_call_answers": agents.tool_call_answers, "served_with_tools": agents.served_with_tools,
                       "by_name": agents.tool_calls_by_name, "subagent_spawns": agents.subagent_spawns,
                       "subagent_requests": agents.subagent_requests, "chat_sessions": len(sessions),
                       "chat_requests": len(chat), "dataset_rows_matched": sorted(matched),
                       "abandoned": chat_summary.abandoned, "gate": gate.returncode})
