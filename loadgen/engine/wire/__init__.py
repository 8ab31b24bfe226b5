"""The lean wire client: HTTP/1.1 on bare sockets, SSE parsing and per-dialect request bodies."""
