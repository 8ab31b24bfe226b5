"""Server-sent events: split a byte stream into (event, data) pairs across arbitrary chunk boundaries."""

from __future__ import annotations


class SSESplitter:
    """Incremental SSE framing: ``feed`` returns the complete events in the bytes so far.

    Events end at a blank line. CRLF is folded to LF, multi-line ``data:`` fields are joined with
    ``\\n`` and comment lines (``:``) are dropped; an event without data is dropped, as the spec says.
    """

    __slots__ = ("_buf", "malformed")

    def __init__(self) -> None:
        self._buf = b""
        self.malformed = 0  # lines that were neither a field nor a comment

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        buf = self._buf + chunk if self._buf else chunk
        hold = False
        if b"\r" in buf:
            # a trailing \r may be the first half of a CRLF split across chunks: keep it back
            hold = buf.endswith(b"\r")
            if hold:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events: list[tuple[bytes | None, bytes]] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            event = self._parse_block(buf[start:end])
            if event is not None:
                events.append(event)
            start = end + 2
        self._buf = buf[start:] + b"\r" if hold else buf[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not ended yet (a truncated stream leaves them here)."""
        return self._buf

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
