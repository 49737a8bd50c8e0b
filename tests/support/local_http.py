"""A real HTTP server on 127.0.0.1 for a test (a free port, stopped at the end)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def serving(handler: Callable[..., Any]) -> Iterator[int]:
    """Serve ``handler`` (a request handler class or factory) for the block; yields the port."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # type: ignore[arg-type]
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield int(srv.server_address[1])
    finally:
        srv.shutdown()
        srv.server_close()
