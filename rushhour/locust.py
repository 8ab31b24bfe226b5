"""rushhour's public Locust users: ``from rushhour.locust import ChatUser, AgentUser, ReplayUser``.

Subclass one in a plain locustfile, set its knobs as class attributes, and run ``locust -f`` (web UI,
headless, or master/workers on one host): every attempt is written to a run folder (``run.json`` and
``records/``) that ``rushhour audit``/``report``/``gate`` read. Options: ``--rh-run-dir`` (default
``runs/<run id>``) and ``--rh-run-id``. See docs/locust.md. This module runs in Locust's (gevent)
process only; the CLI never imports it.
"""

from __future__ import annotations

from rushhour.loadgen.engine.users import AgentUser, ChatUser, ReplayUser, RushhourUser

__all__ = ["AgentUser", "ChatUser", "ReplayUser", "RushhourUser"]
