"""rushhour's simulator: a scenario's personas against the testbed's stack model in virtual time.

The same scenario YAML, personas, phases and tiers as ``rushhour run``, but no sockets and no sleeping:
the testbed's flow control, replicas and profiles (``testbed/``) run on a discrete-event clock, and the
run folder holds the same record shards and ``run.json`` (``mode: simulated``), so the audit, reports,
gate and compare read it unchanged. See docs/capacity.md.
"""
