"""A plain locustfile on rushhour's public Locust users: chat on one tier, an agent swarm on another.

    rushhour example locustfile > locustfile.py      # this file, from an installed rushhour
    locust -f locustfile.py --headless -u 20 -r 5 -t 60s --host http://127.0.0.1:8000 \
        --rh-run-dir runs/example
    rushhour audit runs/example && rushhour gate runs/example

Each Locust user is one closed-loop user (a chat session or an agent task per Locust task); every
attempt is written to the run folder, so the audit, the report and the gate work as after
``rushhour run``. Locust's own statistics and web UI show each tier's TTFT as well.
"""

from __future__ import annotations

from locust import between

from rushhour.locust import AgentUser, ChatUser, RushhourUser


class Guards(RushhourUser):
    """The run's guards, as a scenario's ``resilience``/``budget``: every class sets them alike (one base)."""

    abstract = True
    breaker = {"fail_max": 5, "reset_timeout_s": 10}  # one per route; under master + workers, one for the run
    budget = {"max_requests": 5000}  # under master + workers: one cap, leased by the master


class Chat(Guards, ChatUser):
    """A chat user of team A on the interactive tier (llm-d objective ``interactive``)."""

    weight = 3
    wait_time = between(0.5, 2.0)  # between sessions
    tier, priority, tenants = "interactive", 100, ["team-a"]
    slo = {"ttft_ms": {"p90": 2000}, "max_drop_rate": 0.05}
    turns = 2
    think_time_s = {"dist": "uniform", "low": 0.2, "high": 1.0}
    prompt_tokens = {"dist": "lognormal", "median": 300, "sigma": 0.8, "max": 4000}
    output_tokens = 64
    retries = {"on": ["429", "503"], "max_attempts": 3, "backoff": "retry_after"}  # the tier's retry policy


class Agent(Guards, AgentUser):
    """An agent on the sheddable batch tier: fan-out of up to 3 calls per step, tools in between."""

    weight = 1
    tier, priority, objective = "batch", -1, "batch-sheddable"
    steps = 3
    fanout = {"dist": "uniform", "low": 1, "high": 3}
    tool_time_s = 0.3
    output_tokens = 32
