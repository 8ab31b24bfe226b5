"""Server-sent events: split a byte stream into (event, data) pairs across arbitrary chunk boundaries."""

from __future__ import annotations

from rushhour.loadgen.engine.wire.http import ResponseTooLarge

MAX_EVENT_BYTES = 1024 * 1024  # one event (or one unterminated line) longer than this is refused
EVENT_TOO_LARGE = "SSE event over 1 MiB"
RESCAN_BYTES = 8192  # an unfinished event shorter than this is simply re-scanned with the next read


class SSESplitter:
    """Incremental SSE framing: ``feed`` returns the complete events in the bytes so far.

    Events end at a blank line. CRLF is folded to LF, multi-line ``data:`` fields are joined with
    ``\\n`` and comment lines (``:``) are dropped; an event without data is dropped, as the spec says.
    Only new bytes are scanned (the held-back part is known to hold no event end), and an event that
    grows past ``MAX_EVENT_BYTES`` raises ``ResponseTooLarge``: a stream that never ends its event
    cannot grow the buffer without bound.
    """

    __slots__ = ("_buf", "_cr", "malformed")

    def __init__(self) -> None:
        self._buf: bytes | bytearray = b""  # the start of an event not ended yet (CR/CRLF folded)
        self._cr = False  # a trailing \r held back: maybe the first half of a CRLF split across chunks
        self.malformed = 0  # lines that were neither a field nor a comment

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        if self._cr:
            chunk = b"\r" + chunk
            self._cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._cr = True
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        pending = self._buf
        if not pending:
            buf = chunk
        elif self.absorb(chunk):
            return []
        else:
            buf = bytes(pending) + chunk
        events: list[tuple[bytes | None, bytes]] = []
        start = 0
        scan = len(pending) - 1 if pending else 0  # an event end can only start at the held part's last byte
        while True:
            end = buf.find(b"\n\n", scan)
            if end < 0:
                break
            event = self._parse_block(buf[start:end])
            if event is not None:
                events.append(event)
            start = scan = end + 2
        self._buf = buf[start:]
        if len(self._buf) > MAX_EVENT_BYTES:
            raise ResponseTooLarge(EVENT_TOO_LARGE)
        return events

    def absorb(self, chunk: bytes) -> bool:
        """Append ``chunk`` (CR-free) to a long unfinished event if it cannot end it; else False.

        The held part is known to hold no event end, so a long event that arrives in many reads is
        appended in place (amortised) and only the new bytes are searched: linear, not quadratic.
        """
        pending = self._buf
        if len(pending) < RESCAN_BYTES or b"\n\n" in chunk or (pending[-1] == 10 and chunk[:1] == b"\n"):
            return False
        if type(pending) is bytes:
            pending = self._buf = bytearray(pending)
        pending += chunk
        if len(pending) > MAX_EVENT_BYTES:
            raise ResponseTooLarge(EVENT_TOO_LARGE)
        return True

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not ended yet (a truncated stream leaves them here)."""
        return bytes(self._buf) + b"\r" if self._cr else bytes(self._buf)

    def _parse_block(self, block: bytes) -> tuple[bytes | None, bytes] | None:
        # fast path: the overwhelmingly common single ``data: ...`` line
        if block.startswith(b"data: ") and b"\n" not in block:
            return None, block[6:]
        name: bytes | None = None
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if not line or line.startswith(b":"):
                continue
            key, sep, value = line.partition(b":")
            if not sep:
                if key in (b"data", b"event"):
                    value = b""
                else:
                    self.malformed += 1
                    continue
            if value.startswith(b" "):
                value = value[1:]
            if key == b"data":
                data.append(value)
            elif key == b"event":
                name = value
            elif key in (b"id", b"retry"):
                continue
            else:
                self.malformed += 1
        if not data:
            return None
        return name, b"\n".join(data)
