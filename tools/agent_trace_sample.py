"""Write the generated agent-trace sample (``examples/agent-trace/weka-sample.jsonl``) in the Weka session format.

Usage: ``python tools/agent_trace_sample.py [OUT]``. Deterministic (a fixed seed): running it again writes the
same bytes. The sessions are synthetic — no public Weka/SemiAnalysis session could be obtained here — but follow
the published format (one session per line: ``id``, ``block_size``, ``tool_tokens``, ``system_tokens``,
``requests`` of calls ``{t, type, model, in, out, hash_ids, api_time}`` and sub-agents ``{t, type: "subagent",
agent_id, subagent_type, duration_ms, requests}``) and the shape agent traces show: a context that grows call
after call over a shared system prompt, short tool gaps, and a few calls that fan out to parallel sub-agents
whose context starts from the same system prompt. Sizes are small so a run on the testbed lasts seconds.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "examples" / "agent-trace" / "weka-sample.jsonl"
BLOCK = 64
SYSTEM, TOOLS = 256, 128  # tokens every agent of a session starts with
DECODE_S_PER_TOKEN = 0.01  # the recorded calls' own time (api_time): 100 tokens/s


class Blocks:
    """Block hashes of a growing prompt: a shared prefix keeps its ids, new tokens get new ids."""

    def __init__(self, counter: list[int]) -> None:
        self.counter = counter

    def fresh(self, n: int) -> list[int]:
        out = list(range(self.counter[0], self.counter[0] + n))
        self.counter[0] += n
        return out


def _chain(rng: random.Random, blocks: Blocks, start_s: float, base: list[int], base_tokens: int, calls: int,
           model: str) -> tuple[list[dict[str, Any]], float]:
    """``calls`` calls of one agent from a context of ``base_tokens`` (hashes ``base``); returns them and the end."""
    out: list[dict[str, Any]] = []
    t, tokens, hashes = start_s, base_tokens, list(base)
    for _ in range(calls):
        tokens += rng.randint(60, 400)  # the tool's result (or the task) appended
        full = tokens // BLOCK
        # full blocks keep their ids as the context grows; the partial last block is new every time
        hashes = hashes[:full] + blocks.fresh(max(0, full - len(hashes)))
        partial = blocks.fresh(1) if tokens % BLOCK else []
        out_tokens = rng.randint(12, 48)
        api = round(0.05 + out_tokens * DECODE_S_PER_TOKEN, 3)
        out.append({"t": round(t, 3), "type": "s", "model": model, "in": tokens, "out": out_tokens,
                    "hash_ids": hashes + partial, "api_time": api})
        tokens += out_tokens  # the answer joins the context
        t += api + round(rng.uniform(0.1, 0.8), 3)  # the tool runs between the answer and the next call
    return out, t


def session(rng: random.Random, n: int, counter: list[int]) -> dict[str, Any]:
    """One session: a main agent of 4-5 calls; its second call fans out to 2-3 sub-agents of 2-3 calls each."""
    blocks = Blocks(counter)
    system = blocks.fresh((SYSTEM + TOOLS) // BLOCK)  # shared by every agent of the session
    first, t = _chain(rng, blocks, 0.0, system, SYSTEM + TOOLS, 2, "main-model")
    spawn_at = first[-1]["t"] + first[-1]["api_time"]
    subs: list[dict[str, Any]] = []
    ends = [t]
    for j in range(rng.randint(2, 3)):
        start = round(spawn_at + rng.uniform(0.02, 0.1), 3)
        calls, end = _chain(rng, blocks, start, system, SYSTEM + TOOLS, rng.randint(2, 3), "sub-model")
        subs.append({"t": start, "type": "subagent", "agent_id": f"s{n}a{j}", "subagent_type": "Explore",
                     "duration_ms": round((end - start) * 1000), "requests": calls,
                     "tool_tokens": TOOLS, "system_tokens": SYSTEM})
        ends.append(end)
    last = first[-1]
    rest, _ = _chain(rng, blocks, max(ends) + 0.2, last["hash_ids"][: last["in"] // BLOCK],
                     last["in"] + last["out"], rng.randint(2, 3), "main-model")
    requests = [*first, *subs, *rest]
    return {"id": f"sample-{n}", "models": ["main-model", "sub-model"], "block_size": BLOCK,
            "tool_tokens": TOOLS, "system_tokens": SYSTEM, "requests": requests}


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUT
    rng = random.Random(40)
    counter = [1]
    lines = [json.dumps(session(rng, n, counter), separators=(",", ":")) for n in range(3)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out} ({len(lines)} sessions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
