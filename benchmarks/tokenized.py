"""Tokenizer-exact prompts at agent-swarm rates: the load process's loop stall, encodings on the loop vs off it.

    .venv/bin/python benchmarks/tokenized.py [--rate 10] [--context 30000] [--steps 3] [--duration 20]

A gevent process (monkey-patched, as a Locust worker is) with a tokenizer trained here on the prompt text
(byte-level BPE, 4,000 tokens, a chat template: no download) starts ``--rate`` agents a second. Each one's
context is ``--context`` tokens: a context shared by every agent (``--shared``, an agent swarm's
``shared_context_tokens``) and its own task context (the rest: a new piece, its key is the agent's); then for
``--steps`` steps it appends a 500-token tool result and counts its whole prompt through the chat template, as
``wire_send`` does before every request. Meanwhile a sampler greenlet sleeps 1 ms at a time; how much later
than asked it wakes is the loop's stall, what every stream's reading and every timer of the process would wait.
A step's prompt wait runs from its agent's scheduled arrival (the first step) or from the step's start: the
time to a counted prompt, what a request's send would be late by.
Three rows, one after the other in one run, each in a fresh process: ``no agents`` (the sampler alone: what the
machine itself adds, the floor), ``on the loop`` (every encoding on the loop's thread: the code before
loadgen/engine/tokenize.py) and ``off the loop`` (``off_loop``: each encoding in a thread of gevent's pool, the
GIL released while Rust works). Also printed: how long a step waited for its prompt (arrival to counted).
``--contend`` pins each row to one core and runs a busy loop (another process at the same priority) on that
core meanwhile: a host whose cores are wanted by others, where a tokenizer thread of lower priority starved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}"
            "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")
SPECIAL = ["<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]


def make_tokenizer(folder: Path) -> None:
    """A byte-level BPE of 4,000 tokens trained on the prompt base text, with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from rushhour.loadgen import prompts

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([prompts.base()[:1_000_000].decode()], trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "chat_template": TEMPLATE}))


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else float("nan")


def run_mode(folder: Path, mode: str, args: argparse.Namespace, out: Path) -> None:
    """One row, in this (fresh) process: agents at ``args.rate``/s for ``args.duration`` s, the loop sampled."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from rushhour.loadgen import prompts, tokens
    from rushhour.loadgen.engine.tokenize import off_loop

    tok = tokens.load(folder)
    prompts.use_tokenizer(off_loop(tok) if mode == "off" else tok)
    prompts.warm()
    system = prompts.text("system:bench", 800)  # shared by every agent, built once before the clock starts
    shared = prompts.text("shared:bench", args.shared) if args.shared else ""
    lags: list[float] = []
    waits: list[float] = []
    done = [0, 0]  # agents finished, steps counted
    stop_at = time.monotonic() + args.duration

    def sampler() -> None:
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            gevent.sleep(0.001)
            lags.append((time.perf_counter() - t0 - 0.001) * 1e3)

    def agent(i: int, asked: float) -> None:  # asked: its scheduled arrival (a blocked loop starts it late)
        conv = prompts.Conversation(system)
        if shared:
            conv.append("user", shared)
        conv = conv.with_user(prompts.text(f"bench:{mode}:{i}:ctx", max(1, args.context - args.shared)))
        for step in range(args.steps):
            if step:
                conv.append("assistant", prompts.text(f"bench:{mode}:{i}:out{step}", 60))
                conv = conv.with_user(prompts.text(f"bench:{mode}:{i}:tool{step}", 500))
                asked = time.monotonic()
            conv.prompt_tokens("openai-chat")
            waits.append((time.monotonic() - asked) * 1e3)
            done[1] += 1
        done[0] += 1

    cpu0 = time.process_time()
    sampling = gevent.spawn(sampler)
    agents = []
    started = time.monotonic()
    n = 0
    while time.monotonic() < stop_at and mode != "idle":
        agents.append(gevent.spawn(agent, n, started + n / args.rate))
        n += 1
        gevent.sleep(max(0.0, started + n / args.rate - time.monotonic()))
    sampling.join()
    finished_in_window = done[:]
    gevent.joinall(agents, timeout=120)
    out.write_text(json.dumps({"mode": mode, "lags_ms": lags, "waits_ms": waits, "agents": n,
                               "agents_done_in_window": finished_in_window[0], "cpu_s": time.process_time() - cpu0}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10.0, help="agents started per second")
    ap.add_argument("--context", type=int, default=30000, help="tokens of each agent's context (shared + own)")
    ap.add_argument("--shared", type=int, default=24000, help="tokens of it shared by every agent")
    ap.add_argument("--steps", type=int, default=3, help="requests per agent (a whole-prompt count each)")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--modes", default="idle,on,off")
    ap.add_argument("--json", default=None, help="also write the rows' figures as JSON here")
    ap.add_argument("--contend", action="store_true",
                    help="each row on one core, with a busy loop of another process on that core")
    ap.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        run_mode(Path(args.folder), args.mode, args, Path(args.out))
        return
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        make_tokenizer(tmp)
        core = min(os.sched_getaffinity(0))
        for mode in args.modes.split(","):
            out = tmp / f"{mode}.json"
            cmd = [sys.executable, __file__, "--mode", mode, "--folder", str(tmp), "--out", str(out),
                   "--rate", str(args.rate), "--context", str(args.context), "--shared", str(args.shared),
                   "--steps", str(args.steps), "--duration", str(args.duration)]
            hog = None
            if args.contend:
                cmd = ["taskset", "-c", str(core), *cmd]
                hog = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])
            try:
                subprocess.run(cmd, check=True, cwd=ROOT)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            rows.append(json.loads(out.read_text()))
    where = f"core #{core} with a busy loop beside" if args.contend else f"cores {sorted(os.sched_getaffinity(0))}"
    print(f"\n{args.rate:g} agents/s, {args.context:,}-token contexts ({args.shared:,} shared), "
          f"{args.steps} counted requests each, {args.duration:g} s; {where}; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    header = (f"{'encodings':<14}{'stall p50':>10}{'p99':>9}{'max':>9}{'agents':>8}{'done':>6}"
              f"{'prompt wait p50':>17}{'p99':>9}{'CPU s':>7}")
    print(header)
    print("-" * len(header))
    label = {"idle": "no agents", "on": "on the loop", "off": "off the loop"}
    for r in rows:
        print(f"{label.get(r['mode'], r['mode']):<14}{_pct(r['lags_ms'], .5):>8.2f}ms{_pct(r['lags_ms'], .99):>7.1f}ms"
              f"{max(r['lags_ms'], default=float('nan')):>7.0f}ms{r['agents']:>8}{r['agents_done_in_window']:>6}"
              f"{_pct(r['waits_ms'], .5):>15.0f}ms{_pct(r['waits_ms'], .99):>7.0f}ms{r['cpu_s']:>7.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps([
            {"mode": r["mode"], "stall_p50_ms": _pct(r["lags_ms"], .5), "stall_p99_ms": _pct(r["lags_ms"], .99),
             "stall_max_ms": max(r["lags_ms"], default=float("nan")), "agents": r["agents"],
             "agents_done_in_window": r["agents_done_in_window"], "prompt_wait_p50_ms": _pct(r["waits_ms"], .5),
             "prompt_wait_p99_ms": _pct(r["waits_ms"], .99), "cpu_s": r["cpu_s"],
             "load_average_before": load_before, "load_average_after": os.getloadavg()[0]} for r in rows], indent=2))
    by = {r["mode"]: r for r in rows}
    if "on" in by and "off" in by:
        ratio = _pct(by["off"]["lags_ms"], .99) / _pct(by["on"]["lags_ms"], .99)
        print(f"off / on the loop: stall p99 ×{ratio:.3f}")


if __name__ == "__main__":
    main()
