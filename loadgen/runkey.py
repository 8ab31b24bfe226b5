"""The run's secret and what a worker trusts: the HMAC of every master↔worker message, the worker's allow-list.

Pure and standard library only: the runner makes the secret (``new_secret``) and hands it to its Locust
processes in the environment (``SECRET_ENV``, never argv: /proc/<pid>/cmdline is world-readable); the
Locust child's sealed transport (``loadgen/engine/sealed.py``) tags and checks every frame with ``tag``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SECRET_ENV = "RUSHHOUR_RUN_SECRET"  # hex, >= 32 digits (128 bits); the master and every worker of the run
TARGETS_ENV = "RUSHHOUR_WORKER_TARGETS"  # comma-separated URLs a remote worker may send requests (and keys) to
AUTH_FILE = "auth-master.json"  # the master's account of the frames it dropped (loadgen/engine/sealed.py)
MIN_SECRET_HEX = 32
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def new_run_id() -> str:
    """UTC timestamp + a short random suffix: sortable and unique."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def new_secret() -> str:
    """A fresh run secret: 256 random bits as hex."""
    return secrets.token_hex(32)


def parse_secret(text: str | None) -> bytes:
    """The key of a secret's hex text; ValueError (one line, never echoing it) when absent or weak."""
    value = (text or "").strip()
    if not value:
        raise ValueError(f"{SECRET_ENV} is not set: the master and every worker need the run's secret "
                         f"(make one with `python -c 'import secrets; print(secrets.token_hex(32))'`)")
    if len(value) < MIN_SECRET_HEX or len(value) % 2 or not _HEX.match(value):
        raise ValueError(f"{SECRET_ENV} must be at least {MIN_SECRET_HEX} hex digits (an even count)")
    return bytes.fromhex(value)


def secret_from(env: Mapping[str, str] = os.environ) -> bytes:
    """The run's key from the environment (ValueError when missing or weak)."""
    return parse_secret(env.get(SECRET_ENV))


def _field(value: bytes | str | int) -> bytes:
    raw = value.encode() if isinstance(value, str) else value.to_bytes(8, "big") if isinstance(value, int) else value
    return len(raw).to_bytes(8, "big") + raw


def tag(key: bytes, *fields: bytes | str | int) -> bytes:
    """HMAC-SHA256 over a canonical encoding of ``fields`` (each length-prefixed: no two lists encode alike)."""
    return hmac.new(key, b"".join(_field(f) for f in fields), hashlib.sha256).digest()


def verify(key: bytes, mac: object, *fields: bytes | str | int) -> bool:
    """Does ``mac`` tag ``fields`` under ``key`` (constant-time compare)."""
    return isinstance(mac, bytes) and hmac.compare_digest(mac, tag(key, *fields))


def safe_run_id(run_id: object) -> str | None:
    """A run id a worker may use as a folder name under its spool (no separator, no '..'), or None."""
    return run_id if isinstance(run_id, str) and _RUN_ID.match(run_id) else None


Origin = tuple[str, str, int | None]  # scheme, host, port (None in an allow-list entry: any port)


def origin(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL; ``:*`` as the port (allow-lists only) means any port."""
    text = url.strip()
    any_port = text.endswith(":*") or ":*/" in text
    if any_port:
        text = text.replace(":*", "", 1)
    try:
        parts = urlsplit(text)
        port = None if any_port else parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port


def parse_allow(text: str) -> list[Origin]:
    """The origins of a comma-separated allow-list; ValueError names an entry that is not an http(s) URL."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        got = origin(item)
        if got is None:
            raise ValueError(f"{TARGETS_ENV}/--target: {item!r} is not an http(s) URL")
        out.append(got)
    return out


def not_allowed(urls: list[str], allow: list[Origin]) -> list[str]:
    """The URLs whose origin (scheme, host, port) no entry of ``allow`` admits."""
    def admitted(url: str) -> bool:
        got = origin(url) if not url.strip().endswith(":*") else None
        return got is not None and any(got[:2] == entry[:2] and entry[2] in (None, got[2]) for entry in allow)

    return [url for url in urls if not admitted(url)]


def read_account(run_dir: Path) -> dict[str, Any] | None:
    """The master's ``auth-master.json`` (None: no master wrote one: a single process, or it died first)."""
    try:
        data = json.loads((Path(run_dir) / AUTH_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
