"""Credentials never reach a record: registered secrets, key prefixes and userinfo redacted; texts bounded."""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

_SECRET_PATTERNS = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"(?i)(?:bearer|basic)\s+[A-Za-z0-9._\-~+/=]{8,}"),
    re.compile(r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+\.?[A-Za-z0-9_\-]*"),  # a JWT
    # name = value, name: value, "name": "value" for anything named like a credential; `tokens` (counts,
    # `max_tokens=4096`) is not a credential and stays readable
    re.compile(
        r"(?i)\b([A-Za-z_\-]*(?:api[_-]?key|key|token(?!s)|secret|passw(?:or)?d|auth(?:orization)?|credential)"
        r"[A-Za-z_\-]*)(\"?\s*[:=]\s*\"?(?:(?:bearer|basic)\s+)?)[^\s\"',}&;]{4,}"
    ),
]
_KEY_PREFIX = re.compile(r"^(?:(?:bearer|basic)\s+)?(?:sk-ant-(?:api\d+-)?|sk-(?:proj-|svcacct-)?)?", re.I)
ECHO_MIN = 12  # a run of this many characters of a registered key is redacted wherever it shows up
_registered_secrets: set[str] = set()
_secrets_lock = threading.Lock()


# Short error texts: enough to recognise the failure, never a whole hostile body.
MAX_TEXT = 300
# short_text of a free text, remembered: a run writes the same few error texts by the hundred thousand
# (a rejection storm). Forgotten when a secret is registered (redact's answer may change then).
_clean_texts: dict[str, str | None] = {}
_CLEAN_TEXTS_MAX = 4096
_MISSING = object()


def register_secret(value: str) -> None:
    """Remember a credential value so that ``redact`` removes it (whole, without its prefix, or in part)."""
    if value and len(value) >= 4:
        core = _KEY_PREFIX.sub("", value)
        with _secrets_lock:
            _registered_secrets.add(value)
            if core != value and len(core) >= 4:
                _registered_secrets.add(core)
            _clean_texts.clear()  # a remembered sanitised text may hold the new secret


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag that tells keys apart in a report without revealing them."""
    if not secret:
        return ""
    return "fp:" + hashlib.sha256(secret.encode()).hexdigest()[:8]


def _echo_spans(text: str, secret: str) -> list[tuple[int, int]]:
    """Where ``secret`` or any ``ECHO_MIN`` characters of it appear in ``text`` (a partial echo)."""
    spans: list[tuple[int, int]] = []
    size = min(ECHO_MIN, len(secret))
    seen: set[str] = set()
    for i in range(len(secret) - size + 1):
        piece = secret[i : i + size]
        if piece in seen:
            continue
        seen.add(piece)
        at = text.find(piece)
        while at >= 0:
            spans.append((at, at + size))
            at = text.find(piece, at + 1)
    return spans


def _cut_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(spans):
        if end <= pos:
            continue
        if start > pos:
            out.append(text[pos:start])
            out.append("[redacted]")
        elif not out or out[-1] != "[redacted]":
            out.append("[redacted]")
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def redact(text: str | None) -> str | None:
    """Strip registered credentials (whole or any 12 characters of one) and anything shaped like a key."""
    if text is None:
        return None
    with _secrets_lock:
        secrets = list(_registered_secrets)
    spans = [span for secret in secrets for span in _echo_spans(text, secret)]
    if spans:
        text = _cut_spans(text, spans)
    for pattern in _SECRET_PATTERNS:
        if pattern.groups >= 2:
            text = pattern.sub(lambda m: m.group(1) + m.group(2) + "[redacted]", text)
        else:
            text = pattern.sub("[redacted]", text)
    return text


def strip_userinfo(url: str) -> str:
    """``http://user:secret@host/x`` -> ``http://host/x``: a password in a URL is a credential too."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", url)


def short_text(text: str | bytes | None, limit: int = MAX_TEXT) -> str | None:
    """Sanitise a server-supplied text: decode, drop control characters, redact, cut."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text[: limit * 4].decode("utf-8", errors="replace")
    text = "".join(ch if ch.isprintable() else " " for ch in text[: limit * 4]).strip()
    text = redact(text) or ""
    return text[:limit]


def error_summary(obj: Any) -> tuple[str | None, str | None]:
    """(reason, short text) from an error object in any of the dialects' shapes."""
    if not isinstance(obj, dict):
        return None, short_text(str(obj))
    err = obj.get("error", obj)
    if isinstance(err, str):
        return None, short_text(err)
    if not isinstance(err, dict):
        return None, short_text(str(err))
    code = err.get("code")
    etype = err.get("type")
    reason: str | None = None
    if isinstance(code, str) and code:
        reason = code
    elif isinstance(etype, str) and etype:
        reason = etype
    elif code is not None:
        reason = str(code)
    message = err.get("message") or etype or code or "error"
    return (short_text(reason) if reason else None), short_text(str(message))


def clean_text(text: str) -> str | None:
    """``short_text`` of a record's free text, remembered (forgotten when a secret is registered)."""
    out = _clean_texts.get(text, _MISSING)
    if out is _MISSING:
        if len(_clean_texts) >= _CLEAN_TEXTS_MAX:
            _clean_texts.clear()
        out = _clean_texts[text] = short_text(text)
    return out  # type: ignore[return-value]
