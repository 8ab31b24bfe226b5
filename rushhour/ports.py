"""Whether a port this machine should listen on is free, asked before a run starts (one line if not)."""

from __future__ import annotations

import errno
import socket


def listen_problem(host: str, port: int, option: str) -> str | None:
    """None when ``host:port`` can be listened on now; else one line naming ``option`` as the way out."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # as the servers that will bind it do: a port held only by TIME_WAIT connections is free
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} is in use: pass {option} N"
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"{host} is not an address of this machine: pass another address"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        except (OverflowError, socket.gaierror) as exc:  # a port out of range, a name that does not resolve
            return f"cannot listen on {host}:{port}: {exc}"
    return None
