"""Ed25519 signatures of a run folder's ``integrity.json`` (``rushhour verify --sign / --key``), in ``integrity.sig``.

What is signed is the manifest's content (``Manifest.content_bytes``: the run id and every file's hash and
size, canonical JSON), so a re-audit that writes the very same files keeps the signature good.

For vendor disputes: whoever holds the public key can check that a folder is the one the key's holder
signed, which the manifest alone cannot show (anyone who edits a file can rewrite the manifest too).
Keys come only from the environment (``env:NAME``, as credentials do elsewhere) and are never printed,
logged or written; ``integrity.sig`` holds the public key, the signed content's SHA-256 and the signature.

``cryptography`` (the PyCA library, pinned in pyproject.toml) does the Ed25519: the standard library has
no public-key signature, and an HMAC would make every checker a possible forger.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNATURE_SCHEMA = "rushhour.signature/1"
ALGORITHM = "ed25519"
DOMAIN = b"rushhour.integrity/1\0"  # signed before the manifest's bytes: a signature of nothing else
MAX_KEY_CHARS = 16 << 10
MAX_SIGNATURE_BYTES = 64 << 10
_ENV = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")


class KeyProblem(ValueError):
    """A key that cannot be used; ``str()`` names the variable, never its value."""


@dataclass(frozen=True)
class Key:
    """A key from the environment: the private half when given (it can sign), always the public half."""

    public: Ed25519PublicKey
    private: Ed25519PrivateKey | None

    @property
    def key_id(self) -> str:
        """The first 16 hex digits of the public key's SHA-256: which key, without showing one."""
        return key_id(raw_public(self.public))


def raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


def _raw_bytes(text: str) -> bytes | None:
    """32 bytes written as 64 hex digits or as base64; None otherwise."""
    try:
        raw = bytes.fromhex(text) if re.fullmatch(r"[0-9a-fA-F]{64}", text) else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        return None
    return raw if len(raw) == 32 else None


def load_key(spec: str, environ: dict[str, str] | None = None) -> Key:
    """``env:NAME`` → its key: a PEM private or public Ed25519 key, or a raw 32-byte private seed (hex or base64)."""
    match = _ENV.fullmatch(spec.strip())
    if not match:
        raise KeyProblem(f"a key is given as env:NAME (an environment variable's name), not {spec[:40]!r}")
    name = match.group(1)
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        raise KeyProblem(f"environment variable {name} is not set or empty")
    if len(text) > MAX_KEY_CHARS:
        raise KeyProblem(f"environment variable {name} is too long for an Ed25519 key")
    try:
        if "PRIVATE KEY-----" in text:
            private = serialization.load_pem_private_key(text.encode(), password=None)
            if not isinstance(private, Ed25519PrivateKey):
                raise ValueError
            return Key(private.public_key(), private)
        if "PUBLIC KEY-----" in text:
            public = serialization.load_pem_public_key(text.encode())
            if not isinstance(public, Ed25519PublicKey):
                raise ValueError
            return Key(public, None)
    except (ValueError, TypeError):  # the library's message may quote the key: never shown
        raise KeyProblem(f"environment variable {name} is not an Ed25519 key (PEM, unencrypted)") from None
    raw = _raw_bytes(text)
    if raw is None:
        raise KeyProblem(f"environment variable {name} is not an Ed25519 key (PEM, or a 32-byte seed in hex or base64)")
    private = Ed25519PrivateKey.from_private_bytes(raw)
    return Key(private.public_key(), private)


def sign(manifest_bytes: bytes, key: Key) -> bytes:
    """``integrity.sig``'s bytes: the manifest's SHA-256 and its Ed25519 signature by ``key`` (a private key)."""
    if key.private is None:
        raise KeyProblem("signing needs the private key; this is a public key")
    raw = raw_public(key.public)
    body = {
        "schema": SIGNATURE_SCHEMA, "algorithm": ALGORITHM, "key_id": key_id(raw),
        "public_key": base64.b64encode(raw).decode(),
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "signature": base64.b64encode(key.private.sign(DOMAIN + manifest_bytes)).decode(),
    }
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


def check(manifest_bytes: bytes, signature_bytes: bytes, key: Key) -> str | None:
    """None when ``signature_bytes`` is ``key``'s signature of exactly these manifest bytes, else why not (one line)."""
    try:
        if len(signature_bytes) > MAX_SIGNATURE_BYTES:
            raise ValueError
        body = json.loads(signature_bytes)
        if not isinstance(body, dict) or body.get("schema") != SIGNATURE_SCHEMA or body.get("algorithm") != ALGORITHM:
            raise ValueError
        public = base64.b64decode(str(body["public_key"]), validate=True)
        signature = base64.b64decode(str(body["signature"]), validate=True)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return f"damaged signature file (not a {SIGNATURE_SCHEMA} {ALGORITHM} signature)"
    if public != raw_public(key.public):
        return f"signed with another key (key {key_id(public)}), not key {key.key_id}"
    if body.get("manifest_sha256") != hashlib.sha256(manifest_bytes).hexdigest():
        return "integrity.json changed after it was signed"
    try:
        key.public.verify(signature, DOMAIN + manifest_bytes)
    except InvalidSignature:
        return "the signature does not match integrity.json"
    return None


def read_bounded(path: Path, limit: int) -> bytes:
    """A file's bytes, at most ``limit`` + 1 (a larger one is refused by the parser)."""
    with open(path, "rb") as handle:
        return handle.read(limit + 1)
