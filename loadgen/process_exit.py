"""How a run's load processes ended (pure): one killed by a signal is named with the signal, never taken for Ctrl-C."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import Any

EXIT_LOAD_LOST = 4  # `rushhour run`: a load process was killed (a signal, out of memory) or had to be; records partial
_WHY = {
    "SIGKILL": "the kernel's out-of-memory killer, or another process: see `dmesg`",
    "SIGSEGV": "a crash",
    "SIGABRT": "a crash",
    "SIGBUS": "a crash",
    "SIGXCPU": "its CPU-time limit",
    "SIGXFSZ": "its file-size limit",
}


def signal_name(returncode: int | None) -> str | None:
    """The signal that ended a process (``Popen.returncode`` < 0), or None when it exited by itself."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def killed_line(role: str, pid: int, returncode: int | None) -> str | None:
    """"the Locust master (PID 123) was killed by SIGKILL (…)", or None when it was not killed."""
    name = signal_name(returncode)
    if name is None:
        return None
    why = _WHY.get(name)
    return f"the {role} (PID {pid}) was killed by {name}" + (f" ({why})" if why else "")


def lost_shards(events: Iterable[dict[str, Any]]) -> list[str]:
    """Shards of load processes that started (``worker_start``) and never said they stopped (``worker_stop``)."""
    started: dict[str, None] = {}
    stopped: set[str] = set()
    for event in events:
        shard = str(event.get("shard") or "")
        if event.get("name") == "worker_start" and not shard.endswith("-calibration"):
            started[shard] = None
        elif event.get("name") == "worker_stop":
            stopped.add(shard)
    return [shard for shard in started if shard not in stopped]


def cut_shares(events: Iterable[dict[str, Any]]) -> list[str]:
    """Shards of load processes that stopped ``interrupted`` (their share cut by a stop they did not make)."""
    return [str(event.get("shard") or "") for event in events
            if event.get("name") == "worker_stop" and not str(event.get("shard") or "").endswith("-calibration")
            and (event.get("detail") or {}).get("reason") == "interrupted"]
