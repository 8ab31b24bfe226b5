"""Remote workers' shards travel to the master's run folder over Locust's own messages.

A worker started with ``rushhour worker`` (Locust ``--worker``, ``--rh-ship`` from the master) writes
its shard to a local spool and a shipper tails it: every ``SHIP_INTERVAL_S`` the complete new lines
go to the master as one ``rh_shard`` message ``{name, offset, data}``; at the stop the rest follows
and a ``rh_shard_done`` message carries the local file's size and SHA-256. The master appends each
batch to ``records/<name>`` (append-only, flushed to the kernel at once), so a worker killed mid-run
keeps every line it shipped, and notes each worker's state changes and every shard's checksum in
``workers.jsonl``. A ``rh_clock`` request/answer pair measures the worker's wall-clock offset to the
master before the load starts (``clock_offset`` below).

Standard library only, and duck-typed on Locust's runner: the Locust child imports it (where
``threading`` and ``time`` are gevent's), so it needs neither gevent nor locust itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MSG_SHARD = "rh_shard"
MSG_DONE = "rh_shard_done"
MSG_FINISHED = "rh_finished"  # a worker drove its whole share and shipped it; it waits for the master's quit
MSG_REFUSED = "rh_refused"  # a worker could not start (a file missing on its host, …): {who, reason}
MSG_CLOCK = "rh_clock"  # worker → master: measure my clock
MSG_CLOCK_PING = "rh_clock_ping"  # master → worker: {id}; the master times the round trip on its own clock
MSG_CLOCK_PONG = "rh_clock_pong"  # worker → master: {id, worker_ns}
MSG_CLOCK_ANSWER = "rh_clock_answer"  # master → worker: the offset the master measured (or none)
SHIP_INTERVAL_S = 0.25
MAX_BATCH_BYTES = 1 << 20  # one message at most (complete lines; a longer line goes alone)
# the master's limits on what a worker may ship (a worker writes one shard; a long run's shard is far below)
MAX_SHARDS_PER_WORKER = 2
MAX_WORKER_BYTES = 8 << 30
MAX_OPEN_SHARDS = 1024
CLOCK_ROUNDS = 5
CLOCK_ROUND_S = 2.0
WORKERS_LOG = "workers.jsonl"
SPOOL_ENV = "RUSHHOUR_SPOOL"  # where a remote worker keeps its own copy of its shard
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.jsonl$")


def spool_dir(run_id: str) -> Path:
    """A remote worker's local run folder (never the master's: on a shared disk they would collide)."""
    base = os.environ.get(SPOOL_ENV) or str(Path.home() / ".cache" / "rushhour" / "spool")
    return Path(base) / run_id


def safe_name(name: object) -> str | None:
    """A shard file name a worker may ask the master to write (no path, no hidden file), or None."""
    return name if isinstance(name, str) and _NAME.match(name) and ".." not in name else None


def complete_lines(data: bytes) -> bytes:
    """The prefix of ``data`` that ends with a newline (a half-written last line waits)."""
    cut = data.rfind(b"\n")
    return data[: cut + 1] if cut >= 0 else b""


ANCHOR_FILE = "anchor.json"  # the anchor the Locust master took at its test start, for the runner that started it
# The schedule starts this long after the anchor is taken: the spawn message reaches the workers, they build
# their context (scenario, routes, prompt base, shard) and, on other hosts, measure their clocks.
ANCHOR_LEAD_S = 3.0
# A single local process takes the anchor itself once its context is built, so its lead only has to cover the
# runner's side: seeing the anchor file (polled every 50 ms), putting the testbeds' faults on its clock and the
# metrics scraper's first (baseline) scrape. The 3-s lead cost every local run ~2.5 s of idling (Dec 2026: the
# process was ready ~1.4 s into it on a busy 2-core machine).
LOCAL_ANCHOR_LEAD_S = 1.0


def anchor_lead_s(processes: int, remote_workers: bool) -> float:
    """Seconds from the anchor's taking to the schedule's start: short for one local process, else the full lead."""
    return LOCAL_ANCHOR_LEAD_S if processes <= 1 and not remote_workers else ANCHOR_LEAD_S


def write_anchor(run_dir: Path, mono_ns: int, wall_ns: int, lead_ns: int | None = None) -> None:
    """Write the anchor the Locust master took, and the lead it gave (temp file + rename: the runner never reads
    half)."""
    tmp = Path(run_dir) / (ANCHOR_FILE + ".tmp")
    data = {"mono_anchor_ns": mono_ns, "wall_anchor_ns": wall_ns}
    if lead_ns is not None:  # the anchor was taken this long before t = 0 (benchmarks/run_overhead.py splits at it)
        data["lead_ns"] = lead_ns
    tmp.write_text(json.dumps(data))
    tmp.replace(Path(run_dir) / ANCHOR_FILE)


def read_anchor(run_dir: Path) -> tuple[int, int] | None:
    """The anchor the Locust master wrote, or None while it is still starting (or its workers joining)."""
    try:
        data = json.loads((Path(run_dir) / ANCHOR_FILE).read_text())
        return int(data["mono_anchor_ns"]), int(data["wall_anchor_ns"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- worker side


class Shipper:
    """Tails one local shard and sends its complete lines to the master until ``finish``."""

    def __init__(self, runner: Any, path: Path) -> None:
        self.runner = runner
        self.path = Path(path)
        self.offset = 0  # bytes of the local file already shipped
        self.batches = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._finished = False
        self._thread = threading.Thread(target=self._loop, name="rh-shipper", daemon=True)

    def start(self) -> Shipper:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(SHIP_INTERVAL_S):
            with contextlib.suppress(Exception):  # a failed send is retried from the same offset
                self.ship()

    def ship(self, final: bool = False) -> int:
        """Send what is new in the file (complete lines; everything when ``final``); bytes sent."""
        with self._lock:
            sent = 0
            with self.path.open("rb") as handle:
                while True:
                    handle.seek(self.offset)
                    data = handle.read(MAX_BATCH_BYTES)
                    chunk = data if final else complete_lines(data)
                    if not chunk and data and len(data) == MAX_BATCH_BYTES:
                        chunk = data  # one line longer than a batch: send it in pieces
                    if not chunk:
                        return sent
                    self.runner.send_message(MSG_SHARD, {"name": self.path.name, "offset": self.offset, "data": chunk})
                    self.offset += len(chunk)
                    self.batches += 1
                    sent += len(chunk)

    def finish(self) -> None:
        """After the shard is closed: ship the rest, then its size and checksum (once)."""
        if self._finished:
            return
        self._finished = True
        self._stop.set()
        self.ship(final=True)
        digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
        self.runner.send_message(MSG_DONE, {"name": self.path.name, "size": self.offset, "sha256": digest})


@dataclass(slots=True)
class ClockOffset:
    """The master's wall clock minus this host's, and half the round trip it was measured over."""

    offset_ns: int
    uncertainty_ns: int


def clock_offset(runner: Any, timeout_s: float = CLOCK_ROUNDS * CLOCK_ROUND_S + 5.0) -> ClockOffset | None:
    """Ask the master to measure this host's clock: it times ``CLOCK_ROUNDS`` pings on its own clock and
    keeps the shortest round trip (the worker only answers with its wall clock: its word is never the offset)."""
    got = threading.Event()
    answer: dict[str, Any] = {}

    def on_ping(msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        runner.send_message(MSG_CLOCK_PONG, {"id": data.get("id"), "worker_ns": time.time_ns()})

    def on_answer(msg: Any, **_: Any) -> None:
        answer.update(msg.data if isinstance(msg.data, dict) else {})
        got.set()

    runner.register_message(MSG_CLOCK_PING, on_ping)
    runner.register_message(MSG_CLOCK_ANSWER, on_answer)
    runner.send_message(MSG_CLOCK, {})
    if not got.wait(timeout_s):
        return None
    offset, uncertainty = answer.get("offset_ns"), answer.get("uncertainty_ns")
    if not (isinstance(offset, int) and isinstance(uncertainty, int)) or uncertainty < 1:
        return None
    return ClockOffset(offset, uncertainty)


def best_offset(samples: list[tuple[int, int, int]]) -> ClockOffset | None:
    """The offset (master − worker) from the sample with the shortest round trip; each sample is the master's
    send and receive time and the worker's wall clock in between."""
    best: ClockOffset | None = None
    for t0, t1, worker_ns in samples:
        sample = ClockOffset((t0 + t1) // 2 - worker_ns, max(1, (t1 - t0) // 2))
        if best is None or sample.uncertainty_ns < best.uncertainty_ns:
            best = sample
    return best


def registered(runner: Any, node_id: object) -> bool:
    """Has the (authenticated) sender registered with the master (Locust gave it an index at its
    ``client_ready``, kept after it quits or goes missing: its last batches still count)."""
    indexes = getattr(runner, "worker_indexes", None)
    return isinstance(indexes, dict) and str(node_id) in indexes


# --------------------------------------------------------------------------- master side


def all_done(states: dict[str, str], finished: set[str], late: set[str] | frozenset[str] = frozenset()) -> bool:
    """Every worker the master knows has finished or gone missing (and at least one finished). A
    ``late`` worker (one that joined after the run's shares were dealt: it has no share) is not waited for."""
    return bool(finished) and all(cid in finished or state == "missing" or cid in late
                                  for cid, state in states.items())


def late_workers(runner: Any, cids: Any, expected: int) -> set[str]:
    """The workers whose Locust index is past the run's worker count (joined late: a restarted one)."""
    if expected < 1:
        return set()
    indexes = getattr(runner, "worker_indexes", None)
    if not isinstance(indexes, dict):
        return set()
    return {cid for cid in cids if isinstance(indexes.get(cid), int) and indexes[cid] >= expected}


class Refusals:
    """Every master: a worker that cannot start says why; the master writes the line where the runner
    looks for a start failure (its own stderr, locust.log), notes it in ``workers.jsonl`` and ends the
    run at once (that worker's share would never be sent)."""

    def __init__(self, runner: Any, run_dir: Path) -> None:
        self.runner = runner
        self.log_path = Path(run_dir) / WORKERS_LOG
        self.lines: list[str] = []

    def install(self) -> Refusals:
        self.runner.register_message(MSG_REFUSED, self.on_refused)
        return self

    def on_refused(self, msg: Any, **_: Any) -> None:
        from rushhour.records.record import START_FAILED_MARK, short_text

        if not registered(self.runner, msg.node_id):  # only a worker of this run may end it so
            return
        data = msg.data if isinstance(msg.data, dict) else {}
        who = short_text(str(data.get("who") or msg.node_id), 120)
        reason = short_text(str(data.get("reason") or "no reason given"), 400)
        line = f"{START_FAILED_MARK} worker {who} refused to start: {reason}"
        self.lines.append(line)
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode(errors="replace"))
        with contextlib.suppress(OSError), self.log_path.open("a") as handle:
            handle.write(json.dumps({"ts_wall_ns": time.time_ns(), "event": "worker_refused",
                                     "worker": str(msg.node_id), "who": who, "reason": reason}) + "\n")
        if len(self.lines) == 1:
            threading.Thread(target=self.runner.quit, name="rh-refused", daemon=True).start()


class FinishWatch:
    """A master whose workers do not ship (``--processes N``): ends the run once every worker has
    finished its share (``MSG_FINISHED``) or gone missing. A worker that quit on its own would make
    Locust move its finished user onto a worker still running (a rebalance), and that worker would
    then never quit (its own user and the moved one are stopped from inside the user)."""

    def __init__(self, runner: Any, expected: int = 0) -> None:
        self.runner = runner
        self.expected = expected
        self.finished: set[str] = set()
        self._quitting = False

    def install(self) -> FinishWatch:
        self.runner.register_message(MSG_FINISHED, self.on_finished)
        threading.Thread(target=self._watch, name="rh-finish", daemon=True).start()
        return self

    def on_finished(self, msg: Any, **_: Any) -> None:
        if registered(self.runner, msg.node_id):
            self.finished.add(str(msg.node_id))

    def _watch(self) -> None:
        while not self._quitting:
            time.sleep(0.25)
            with contextlib.suppress(Exception):
                now = {str(c.id): str(c.state) for c in self.runner.clients.all}
                if all_done(now, self.finished, late_workers(self.runner, now, self.expected)):
                    self._quitting = True
                    self.runner.quit()

    def close(self) -> None:
        self._quitting = True


class Receiver:
    """The master's end: appends shipped batches to ``records/<name>`` and logs workers' fates."""

    def __init__(self, runner: Any, run_dir: Path, expected: int = 0) -> None:
        self.runner = runner
        self.expected = expected  # the run's worker count: a worker indexed past it joined late
        self.records = Path(run_dir) / "records"
        self.records.mkdir(parents=True, exist_ok=True)
        self.log_path = Path(run_dir) / WORKERS_LOG
        self.received: dict[str, int] = {}
        self._fds: dict[str, int] = {}
        self._states: dict[str, str] = {}
        self.finished: set[str] = set()
        self._quitting = False
        self.owner: dict[str, str] = {}  # shard name → the worker that opened it (nobody else writes there)
        self.shipped: dict[str, int] = {}  # worker → bytes accepted from it
        self.refused: dict[str, int] = {}  # reason → batches refused
        self.done: set[str] = set()  # shards whose end (size, checksum) was judged
        self._pings: dict[str, tuple[int, int, threading.Event, list[int]]] = {}
        self._measured: set[str] = set()

    def install(self) -> Receiver:
        self.runner.register_message(MSG_SHARD, self.on_shard)
        self.runner.register_message(MSG_DONE, self.on_done)
        self.runner.register_message(MSG_CLOCK, self.on_clock)
        self.runner.register_message(MSG_CLOCK_PONG, self.on_pong)
        self.runner.register_message(MSG_FINISHED, self.on_finished)
        threading.Thread(target=self._watch, name="rh-workers", daemon=True).start()
        return self

    def note(self, event: str, **detail: Any) -> None:
        line = {"ts_wall_ns": time.time_ns(), "event": event, **detail}
        with contextlib.suppress(OSError), self.log_path.open("a") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")

    def on_clock(self, msg: Any, **_: Any) -> None:
        """A worker asks to be measured: once per worker, in a thread of its own (the pongs come through here)."""
        worker = str(msg.node_id)
        if registered(self.runner, worker) and worker not in self._measured:
            self._measured.add(worker)
            threading.Thread(target=self._measure, args=(worker,), name="rh-clock", daemon=True).start()

    def _measure(self, worker: str) -> None:
        samples: list[tuple[int, int, int]] = []
        for round_no in range(CLOCK_ROUNDS):
            box: list[int] = []
            got = threading.Event()
            t0 = time.time_ns()
            self._pings[worker] = (round_no, t0, got, box)
            with contextlib.suppress(Exception):
                self.runner.send_message(MSG_CLOCK_PING, {"id": round_no}, client_id=worker)
            if not got.wait(CLOCK_ROUND_S):
                break
            samples.append((t0, box[0], box[1]))
        self._pings.pop(worker, None)
        best = best_offset(samples)
        answer = {"offset_ns": best.offset_ns, "uncertainty_ns": best.uncertainty_ns} if best else {}
        self.note("clock", worker=worker, rounds=len(samples), **answer)
        with contextlib.suppress(Exception):
            self.runner.send_message(MSG_CLOCK_ANSWER, answer, client_id=worker)

    def on_pong(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        waiting = self._pings.get(str(msg.node_id))
        worker_ns = data.get("worker_ns")
        if waiting is None or data.get("id") != waiting[0] or not isinstance(worker_ns, int) or waiting[2].is_set():
            return
        waiting[3][:] = [time.time_ns(), worker_ns]
        waiting[2].set()

    def refuse(self, worker: str, reason: str, **detail: Any) -> None:
        """Drop a batch; note the first few of each reason in workers.jsonl (a flood writes no flood)."""
        self.refused[reason] = self.refused.get(reason, 0) + 1
        if self.refused[reason] <= 10:
            self.note("batch_refused", worker=worker, reason=reason, **detail)

    def on_shard(self, msg: Any, **_: Any) -> None:
        worker = str(msg.node_id)
        data = msg.data if isinstance(msg.data, dict) else {}
        name, chunk, offset = safe_name(data.get("name")), data.get("data"), data.get("offset")
        if (name is None or not isinstance(chunk, bytes) or not isinstance(offset, int) or isinstance(offset, bool)
                or offset < 0):
            self.refuse(worker, "malformed")
            return
        if not registered(self.runner, worker):
            self.refuse(worker, "unregistered", shard=name)
            return
        if len(chunk) > MAX_BATCH_BYTES:
            self.refuse(worker, "batch_too_large", shard=name, size=len(chunk))
            return
        owner = self.owner.get(name)
        if name in self.done:  # its size and checksum are already judged: nothing is appended after them
            self.refuse(worker, "after_done", shard=name)
            return
        if owner is not None and owner != worker:
            self.refuse(worker, "not_its_shard", shard=name)
            return
        if owner is None:
            if sum(1 for who in self.owner.values() if who == worker) >= MAX_SHARDS_PER_WORKER:
                self.refuse(worker, "too_many_shards", shard=name)
                return
            if len(self._fds) >= MAX_OPEN_SHARDS:
                self.refuse(worker, "too_many_open_shards", shard=name)
                return
        have = self.received.get(name, 0)
        if offset > have:  # only contiguous: a far offset would make every later real line look like a resend
            self.refuse(worker, "gap", shard=name, offset=offset, have=have)
            return
        chunk = chunk[have - offset:]  # a batch sent again after a failed send: keep the part not written yet
        if not chunk:
            return
        if self.shipped.get(worker, 0) + len(chunk) > MAX_WORKER_BYTES:
            self.refuse(worker, "worker_bytes_limit", shard=name)
            return
        if name not in self._fds:
            self.owner[name] = worker
            self._fds[name] = os.open(self.records / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.note("shard_open", worker=worker, shard=name)
        view = memoryview(chunk)
        while view:
            view = view[os.write(self._fds[name], view):]
        self.received[name] = have + len(chunk)
        self.shipped[worker] = self.shipped.get(worker, 0) + len(chunk)

    def on_done(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        name = safe_name(data.get("name"))
        if name is None or self.owner.get(name) != str(msg.node_id):
            self.refuse(str(msg.node_id), "not_its_shard" if name else "malformed", shard=name)
            return
        self.done.add(name)
        fd = self._fds.pop(name, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(fd)
            os.close(fd)
        path = self.records / name
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
        ok = digest == data.get("sha256") and self.received.get(name, 0) == data.get("size")
        self.note("shard_complete", worker=str(msg.node_id), shard=name, size=data.get("size"), ok=ok)

    def on_finished(self, msg: Any, **_: Any) -> None:
        if not registered(self.runner, msg.node_id):
            return
        self.finished.add(str(msg.node_id))
        self.note("worker_finished", worker=str(msg.node_id))

    def _watch(self) -> None:
        """Note every worker state change (ready, running, missing, gone) in ``workers.jsonl``; end the
        run once every worker has finished or gone missing (a dead one is never waited for)."""
        while True:
            time.sleep(0.5)
            with contextlib.suppress(Exception):
                now = {str(c.id): str(c.state) for c in self.runner.clients.all}
                indexes = getattr(self.runner, "worker_indexes", {})
                for cid, state in now.items():
                    if self._states.get(cid) != state:
                        self.note("worker_state", worker=cid, state=state, index=indexes.get(cid))
                for cid in set(self._states) - set(now):
                    self.note("worker_state", worker=cid, state="gone")
                self._states = now
                if all_done(now, self.finished, late_workers(self.runner, now, self.expected)) and not self._quitting:
                    self._quitting = True
                    lost = sorted(cid for cid, state in now.items() if state == "missing")
                    self.note("run_done", finished=sorted(self.finished), missing=lost)
                    # Locust's own quit message tells every worker (a rebalance on a worker's own quit
                    # would move its finished user onto a worker still running)
                    self.runner.quit()

    def close(self) -> None:
        """At the master's exit: fsync and close what is still open (a worker that died)."""
        for name, fd in list(self._fds.items()):
            with contextlib.suppress(OSError):
                os.fsync(fd)
                os.close(fd)
            self.note("shard_incomplete", shard=name, received=self.received.get(name, 0))
        self._fds.clear()


# --------------------------------------------------------------------------- budget across processes

MASTER_ACCOUNT = "budget-master.json"  # the master ledger's account (loadgen/engine/lease.py writes it)


def read_master_account(run_dir: Path) -> dict[str, Any] | None:
    """The master ledger's account of a run (None: the run's budget was not leased through a master)."""
    try:
        data = json.loads((Path(run_dir) / MASTER_ACCOUNT).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_SUMMED = ("requests", "prompt_tokens", "output_tokens", "tokens", "cost_usd", "refused")


def merge_budget_usage(events: list[dict[str, Any]], master: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """run.json's ``budget_usage``: every process's ``budget_usage`` event, and their sums (run and per tier).

    With a master ledger (``master``: its account, ``budget-master.json``) every process spent leases
    of the one budget, and ``reached_by`` names which process was refused on which limit; without one
    (a single process) its guard held the whole budget.
    """
    per: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("name") == "budget_usage" and isinstance(event.get("detail"), dict):
            per[str(event.get("shard", len(per)))] = event["detail"]
    if not per:
        return None

    def add(into: dict[str, Any], usage: Any, who: str) -> None:
        if not isinstance(usage, dict):
            return
        for key in _SUMMED:
            value = usage.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                into[key] = round(into.get(key, 0) + value, 6)
        if usage.get("reached"):
            into.setdefault("reached_by", []).append(f"{who}: {usage['reached']}")

    run: dict[str, Any] = {}
    tiers: dict[str, dict[str, Any]] = {}
    for who, detail in sorted(per.items()):
        add(run, detail.get("run"), who)
        for tier, usage in (detail.get("tiers") or {}).items():
            add(tiers.setdefault(str(tier), {}), usage, who)
    out: dict[str, Any] = {"processes": per, "run": run, "tiers": tiers}
    if master is not None:
        out["enforcement"] = "one budget, leased by the master"
        out["master"] = master
    else:
        out["enforcement"] = "one process" if len(per) == 1 else "an equal share per process"
    return out
