"""Build small run folders by hand: real ShardWriter shards, a run.json, optional metrics and ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rushhour.records.manifest import write_manifest
from rushhour.records.record import (
    Anchor,
    BreakerRecord,
    HealthRecord,
    RequestRecord,
    ShardWriter,
    TaskRecord,
)

S = 1_000_000_000
MS = 1_000_000
ANCHOR = Anchor(mono_ns=5_000 * S, wall_ns=1_780_000_000 * S)

TIERS = [
    # p90, not p99: a p99 needs ≥ 100 samples to be judged (audit/gates.py), these runs have 20–40
    {"name": "interactive", "priority": 100, "slo": {"ttft_ms": {"p90": 1000}, "max_drop_rate": 0.01}},
    {"name": "standard", "priority": 0, "slo": {"ttft_ms": {"p90": 5000}}},
    {"name": "batch", "priority": -1, "slo": {}},
]


def scenario(tiers: list[dict[str, Any]] | None = None, profile: str = "llm-d", **extra: Any) -> dict[str, Any]:
    """A resolved scenario as run.json carries it (validated by scenarios.model.Scenario)."""
    tiers = tiers or TIERS
    personas = [
        {"kind": "chat", "name": f"chat-{t['name']}", "tier": t["name"], "arrival": {"rate": 1.0}} for t in tiers
    ]
    personas.append({"kind": "agent_swarm", "name": "agents", "tier": tiers[-1]["name"]})
    body = {"name": "hand", "seed": 3, "target": {"url": "testbed", "profile": profile},
            "tiers": tiers, "personas": personas, "phases": [{"name": "steady", "duration": 60}]}
    body.update(extra)
    return body


class RunBuilder:
    """Write a run folder the way the runner would: run.json plus one shard per process."""

    def __init__(self, root: Path, *, run_id: str = "r1", profile: str = "llm-d",
                 tiers: list[dict[str, Any]] | None = None, duration_s: float | None = 60.0,
                 scenario_extra: dict[str, Any] | None = None) -> None:
        self.dir = Path(root) / run_id
        self.run_id = run_id
        manifest: dict[str, Any] = {
            "run_id": run_id, "scenario": scenario(tiers, profile, **(scenario_extra or {})), "seed": 3,
            "target": {"url": "testbed", "profile": profile}, "mono_anchor_ns": ANCHOR.mono_ns,
            "wall_anchor_ns": ANCHOR.wall_ns, "started_at": "2026-05-28T12:00:00+00:00",
            "versions": {"rushhour": "0.1.0"}, "processes": 1,
        }
        if duration_s is not None:
            manifest["duration_s"] = duration_s
        write_manifest(self.dir, manifest)
        self.writers: dict[str, ShardWriter] = {}
        self.seq = 0

    def writer(self, process: str = "p1", anchor: Anchor = ANCHOR) -> ShardWriter:
        if process not in self.writers:
            path = self.dir / "records" / f"host-{process}.jsonl"
            self.writers[process] = ShardWriter(path, run_id=self.run_id, anchor=anchor)
        return self.writers[process]

    def request(self, *, process: str = "p1", **fields: Any) -> RequestRecord:
        """One attempt; times in ns from the anchor. Defaults: a served 200 with 100 ms TTFT."""
        self.seq += 1
        rid = fields.pop("request_id", f"req-{self.seq}")
        sent = fields.pop("sent_ns", self.seq * 10 * MS)
        at = sent if sent is not None else fields.get("intended_ns", 0)
        base: dict[str, Any] = {
            "run_id": self.run_id, "seq": self.seq, "request_id": rid, "logical_id": fields.pop("logical_id", rid),
            "tier": "interactive", "tenant": "interactive-t0", "persona": "chat-interactive",
            "intended_ns": at, "sent_ns": sent, "status": 200, "complete": True,
            "headers_ns": at + 50 * MS, "first_token_ns": at + 100 * MS, "last_token_ns": at + 500 * MS,
            "done_ns": at + 500 * MS, "tokens": 11, "output_tokens": 11, "prompt_tokens": 300,
        }
        base.update(fields)
        record = RequestRecord(**base)
        self.writer(process).write(record)
        return record

    def dropped(self, *, status: int, reason: str | None = None, error: str | None = None, **fields: Any
                ) -> RequestRecord:
        """An attempt the server refused before any token."""
        sent = fields.pop("sent_ns", (self.seq + 1) * 10 * MS)
        wait = fields.pop("wait_ns", 5 * MS)
        return self.request(sent_ns=sent, status=status, reason=reason, error=error, complete=False,
                            headers_ns=sent + wait, first_token_ns=None, last_token_ns=None, done_ns=sent + wait,
                            tokens=0, output_tokens=None, **fields)

    def task(self, process: str = "p1", **fields: Any) -> None:
        self.seq += 1
        self.writer(process).write(TaskRecord(run_id=self.run_id, seq=self.seq, **fields))

    def health(self, ts_ns: int, loop_lag_ns: int, cpu_percent: float, process: str = "p1", **kw: Any) -> None:
        self.seq += 1
        self.writer(process).write(HealthRecord(run_id=self.run_id, seq=self.seq, ts_ns=ts_ns,
                                                loop_lag_ns=loop_lag_ns, cpu_percent=cpu_percent, **kw))

    def breaker(self, ts_ns: int, route: str, state: str, previous: str, process: str = "p1") -> None:
        self.seq += 1
        self.writer(process).write(BreakerRecord(run_id=self.run_id, seq=self.seq, ts_ns=ts_ns, route=route,
                                                 state=state, previous=previous))

    def metrics(self, scrapes: list[tuple[int, list[tuple[str, dict[str, str], float]]]]) -> None:
        """``metrics.jsonl``: (ts_ns from the anchor, [(name, labels, value)]) per scrape."""
        with (self.dir / "metrics.jsonl").open("w") as fh:
            for ts, samples in scrapes:
                fh.write(json.dumps({"ts_ns": ts, "samples": [
                    {"name": n, "labels": lab, "value": v} for n, lab, v in samples]}) + "\n")

    def close(self) -> Path:
        for writer in self.writers.values():
            writer.close()
        return self.dir
