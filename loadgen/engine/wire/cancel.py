"""The hard stop's exception, in a module of its own: kept out of the wire client's compiled build.

Compiled with mypyc (a subclass of greenlet's ``GreenletExit``, a C type of another extension), a `locust -f`
web UI stop during streaming ended the process with a segfault in the allocator (3 runs of 3, 7 Dec 2026; 0 of 3
with this class interpreted, the rest of ``wire.client`` compiled; ``test_locust_native``'s web UI test), so it
stays interpreted here and ``wire.client`` re-exports it.
"""

from __future__ import annotations

import gevent


class Cancelled(gevent.GreenletExit):
    """Raised into a request's greenlet at the run's hard stop: the attempt is recorded cancelled."""
