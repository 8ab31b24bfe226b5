"""The parent side of a multi-host run: the command line of a remote worker (``rushhour worker``)."""

from __future__ import annotations

import ipaddress
import socket
import sys
import time
from pathlib import Path

from rushhour.loadgen import runkey
from rushhour.loadgen.ship import SPOOL_ENV

DEFAULT_MASTER_PORT = 5557  # Locust's own default
LOCUSTFILE = Path(__file__).parent / "engine" / "locustfile.py"  # the Locust child (loadgen/engine/)
RESOLVE_WAIT_S = 10.0


def parse_master(address: str) -> tuple[str, int]:
    """``HOST[:PORT]`` (``[v6]:PORT`` too) → (host, port); ValueError with a one-line reason."""
    text = address.strip()
    if not text:
        raise ValueError("--master is empty: give the master's HOST[:PORT]")
    host, port = text, DEFAULT_MASTER_PORT
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"--master {address!r}: unclosed '[' in an IPv6 address")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"--master {address!r}: expected ':PORT' after the address")
            port = _port(rest[1:], address)
    elif text.count(":") == 1:
        host, raw = text.split(":")
        port = _port(raw, address)
    elif ":" in text and not _is_ipv6(text):
        raise ValueError(f"--master {address!r}: more than one ':' (an IPv6 address with a port goes in [brackets])")
    if not host:
        raise ValueError(f"--master {address!r}: no host")
    return host, port


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def resolve_master(host: str, wait_s: float = RESOLVE_WAIT_S) -> None:
    """Raise ValueError (one line) when ``host`` does not resolve within ``wait_s``.

    Locust's worker retries a name that does not resolve for minutes, silently; a typo must end at once.
    A few seconds of retries leave room for a name that is still being published (a new Kubernetes Service).
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except (socket.gaierror, UnicodeError) as exc:
            if time.monotonic() >= deadline:
                reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
                raise ValueError(f"--master: cannot resolve {host!r} ({reason})") from None
            time.sleep(1.0)


def _port(raw: str, address: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"--master {address!r}: port must be 1..65535")
    return int(raw)


def worker_command(master: str, loglevel: str = "INFO") -> list[str]:
    """``python -m locust -f loadgen/engine/locustfile.py --worker --master-host H --master-port P``."""
    host, port = parse_master(master)
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker", "--master-host", host,
            "--master-port", str(port), "--headless", "--loglevel", loglevel]


def worker_env(env: dict[str, str], targets: list[str], spool: Path | None = None) -> dict[str, str]:
    """A remote worker's environment: the run's secret checked, its allow-list of targets (``--target`` on
    top of ``RUSHHOUR_WORKER_TARGETS``) and its spool; ValueError (one line) when the secret or list is unusable."""
    runkey.secret_from(env)
    allow = ",".join([env.get(runkey.TARGETS_ENV, ""), *targets]).strip(",")
    if not runkey.parse_allow(allow):
        raise ValueError(f"give --target URL (or {runkey.TARGETS_ENV}): the stack this worker may send requests "
                         "and the scenario's credentials to; it refuses any other URL its master asks for")
    out = {**env, runkey.TARGETS_ENV: allow}
    if spool is not None:
        out[SPOOL_ENV] = str(spool.resolve())
    return out
