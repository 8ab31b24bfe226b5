"""One breaker per route for the whole run: a process whose breaker opens or closes tells the master,
which tells every other process (Locust's custom messages; ``--processes N`` and ``rushhour worker``).

Only a process's *own* changes travel (``open`` when its failures tripped it or its probe failed,
``closed`` when its probe succeeded); a change made because another process said so carries the
cause ``shared: <route> opened|closed on <process>: <its cause>`` and is not relayed again. Each
process still writes its own ``breaker`` lines, so its shard says when *it* refused sends; the
master keeps the run's account in ``breakers-master.jsonl`` (its wall clock, who, what, why).
Standard library only, duck-typed on Locust's runner.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path
from typing import Any

from rushhour.loadgen.breaker import CLOSED, OPEN, SHARED

MSG_CHANGE = "rh_breaker"  # worker → master: {route, state, cause, who}
MSG_FOLLOW = "rh_breaker_follow"  # master → every other worker: the same
MASTER_LOG = "breakers-master.jsonl"


def relayed(state: str, cause: str | None) -> bool:
    """Does this change of a process's breaker go to the others? Its own opens and closes do."""
    return state in (OPEN, CLOSED) and not (cause or "").startswith(SHARED)


class BreakerShare:
    """A worker's end: sends its own changes, follows the others' (``breakers``: route → RouteBreaker)."""

    def __init__(self, runner: Any, breakers: dict[str, Any], who: str = "") -> None:
        self.runner = runner
        self.breakers = breakers
        self.who = who or socket.gethostname()
        self.sent = 0
        self.followed = 0

    def install(self) -> BreakerShare:
        self.runner.register_message(MSG_FOLLOW, self.on_follow)
        return self

    def changed(self, route: str, state: str, cause: str | None) -> None:
        """Call from the breakers' ``on_change``: tell the master about this process's own changes."""
        if not relayed(state, cause):
            return
        self.sent += 1
        with contextlib.suppress(Exception):  # no master: this process's breaker still works alone
            self.runner.send_message(MSG_CHANGE, {"route": route, "state": state, "cause": cause or "",
                                                  "who": self.who})

    def on_follow(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        breaker = self.breakers.get(str(data.get("route")))
        if breaker is None:
            return
        state, why = data.get("state"), f"{SHARED}{data.get('route')} {data.get('state')} on {data.get('who')}"
        if data.get("cause"):
            why += f": {data['cause']}"
        self.followed += 1
        if state == OPEN:
            breaker.force_open(why)
        elif state == CLOSED:
            breaker.force_close(why)


class BreakerRelay:
    """The master's end: passes each change to every other worker and logs it."""

    def __init__(self, runner: Any, run_dir: Path) -> None:
        self.runner = runner
        self.log_path = Path(run_dir) / MASTER_LOG

    def install(self) -> BreakerRelay:
        self.runner.register_message(MSG_CHANGE, self.on_change)
        return self

    def on_change(self, msg: Any, **_: Any) -> None:
        data = msg.data if isinstance(msg.data, dict) else {}
        if data.get("state") not in (OPEN, CLOSED) or not isinstance(data.get("route"), str):
            return
        line = {"ts_wall_ns": time.time_ns(), "worker": str(msg.node_id), "route": data["route"],
                "state": data["state"], "cause": str(data.get("cause") or ""), "who": str(data.get("who") or "")}
        with contextlib.suppress(OSError), self.log_path.open("a") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")
        for client in list(self.runner.clients.all):
            if str(client.id) != str(msg.node_id):
                with contextlib.suppress(Exception):
                    self.runner.send_message(MSG_FOLLOW, line, client_id=client.id)
