"""Fail fast: is this run doomed — does its target refuse every request the same way? (pure)

A run whose first attempts all fail alike (the same HTTP status with the same server text, or the same
connection error) measures nothing but that one mistake: a wrong model name, a wrong key, nothing
listening. The runner feeds this module's ``DoomWatch`` with every request line its shard tail reads,
and judges the calibration probes with ``judge_attempts`` before the load starts; a decision stops
the run within seconds (``stop_reason`` ``aborted_doomed``), names the server's own words in one line
and makes the run invalid. ``rushhour run --keep-going`` turns the watch off.

Only answers that say the *request* is wrong count: a 2xx, a client timeout, an abandoned request or
a capacity answer (408, 429, 503, 529: what a tiered stack says when it is busy, which the audit
measures) disarms the watch for the rest of the run, so a run that starts saturated or flaky is never
stopped by it. Raw facts only (status, error text, transport flag): the audit still classifies
every attempt of the stopped run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rushhour.records.manifest import STOP_DOOMED

DOOM_AFTER = 10  # the first this many finished attempts of the load, all failing alike, stop the run
CALIBRATION_MIN = 3  # calibration probes that must have failed alike (a refused connection: one is enough)
REFUSED_AFTER = 3  # refused connections that stop the load: conclusive sooner, but one could be a restart's blip
CAPACITY_STATUSES = frozenset({408, 429, 503, 529})  # a busy stack's answers: measured, never "doomed"
MAX_MODELS_SHOWN = 12
# the servers' words for an unknown model: vLLM 0.32 "The model `x` does not exist. Valid aliases: …",
# LiteLLM 1.106 "…: Invalid model name passed in model=x. Call `/v1/models` …", OpenAI "model_not_found"
_MODEL_NOT_FOUND = re.compile(r"model\b.*\bdoes not exist|invalid model name|model_not_found|model .*not found", re.I)
_REFUSED = ("ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "gaierror", "EAI_")

OK, SKIP = "ok", "skip"  # an attempt that disarms the watch; one that does not count either way


@dataclass(frozen=True)
class Failure:
    """How an attempt failed: its HTTP status (0: no answer) and the server's (or the socket's) words."""

    status: int
    text: str

    def words(self) -> str:
        """The failure as a user reads it: ``404 The model `x` does not exist.`` or ``ECONNREFUSED: …``."""
        return f"{self.status} {self.text}".strip() if self.status else self.text

    @property
    def refused(self) -> bool:
        """Nothing at the address at all (refused, unreachable, no such host): one attempt says it."""
        return self.status == 0 and any(mark in self.text for mark in _REFUSED)

    @property
    def model_not_found(self) -> bool:
        return self.status in (400, 404) and bool(_MODEL_NOT_FOUND.search(self.text))


def failure_of(record: dict[str, Any]) -> Failure | str:
    """The attempt's ``Failure``, or ``OK`` (it disarms the watch) or ``SKIP`` (it does not count)."""
    if record.get("kind", "request") != "request" or record.get("not_sent") or record.get("cancelled"):
        return SKIP
    if record.get("reason") == "breaker_open" and not record.get("status"):
        return SKIP  # the client's own breaker refused to send: the target said nothing new
    status = record.get("status")
    status = status if isinstance(status, int) else 0
    if 200 <= status < 300 or record.get("client_timeout") or record.get("abandoned"):
        return OK  # the server answers (or is merely slow): whatever this run measures, it is not doomed
    if status in CAPACITY_STATUSES:
        return OK
    text = record.get("error") or record.get("reason") or ("no HTTP answer" if not status else "")
    return Failure(status, str(text)[:300])


def judge_attempts(records: Iterable[dict[str, Any]], at_least: int) -> dict[str, Any] | None:
    """A doom decision when every counted attempt failed alike and there were ``at_least`` of them
    (a refused connection: one, as the calibration stops at its first); None otherwise."""
    watch = DoomWatch(after=at_least, refused_after=1, skip_persona=None)
    for record in records:
        watch.feed(record)
    return watch.decided()


def decision(failure: Failure, count: int, served_models: list[str] | None = None) -> dict[str, Any]:
    """run.json's ``abort`` for a doomed run: what failed, how often, and the one line that says it."""
    return {"stop_reason": STOP_DOOMED, "kind": "doomed", "tier": None, "status": failure.status,
            "error": failure.text, "attempts": count, "message": explain(failure, count, served_models)}


def explain(failure: Failure, count: int, served_models: list[str] | None = None, model: str | None = None) -> str:
    """One line in the server's own words; for an unknown model, the model and what the target serves instead."""
    head = f"all {count} attempts failed alike" if count > 1 else "the first attempt failed"
    if failure.refused:
        return f"the target refuses connections ({failure.text}): is it running, at this address? ({head})"
    said = f"{failure.words()} ({head})"
    if not failure.model_not_found or served_models is None:
        return f"the target answered {said}"
    shown = ", ".join(served_models[:MAX_MODELS_SHOWN]) or "none"
    more = f" and {len(served_models) - MAX_MODELS_SHOWN} more" if len(served_models) > MAX_MODELS_SHOWN else ""
    name = f"model {model!r}" if model else "the model"
    return f"{name} does not exist: served models are {shown}{more}; the target answered {said}"


def with_models(found: dict[str, Any], served_models: list[str] | None, model: str | None = None) -> dict[str, Any]:
    """The decision with the served models named (when the server said the model is unknown)."""
    failure = Failure(int(found["status"]), str(found["error"]))
    if served_models is None or not failure.model_not_found:
        return found
    return {**found, "served_models": served_models[:MAX_MODELS_SHOWN],
            "message": explain(failure, int(found["attempts"]), served_models, model)}


class DoomWatch:
    """Fed with the load's request lines; ``look`` says the run is doomed once its first ``after``
    finished attempts (``refused_after`` refused connections) all failed alike; any other outcome disarms it.

    With fallback routes (``routes``), each route must have failed, each alike: a run whose fallback serves
    measures that fallback, however its primary fails.
    """

    def __init__(self, after: int = DOOM_AFTER, refused_after: int = REFUSED_AFTER,
                 skip_persona: str | None = "calibration", routes: tuple[str, ...] = ("primary",)) -> None:
        self.after, self.refused_after, self.skip_persona = after, min(after, refused_after), skip_persona
        self.routes = routes
        self.first: dict[str, Failure] = {}  # route -> how its first attempt failed
        self.count = 0
        self.disarmed = False

    def feed(self, record: dict[str, Any], shard: str = "") -> None:
        """Take one line as the shard tail read it (the calibration probes are judged on their own)."""
        if self.disarmed or record.get("kind", "request") != "request":
            return
        if self.skip_persona is not None and record.get("persona") == self.skip_persona:
            return
        got = failure_of(record)
        if got == SKIP:
            return
        route = str(record.get("route") or "primary")
        seen = self.first.get(route)
        if not isinstance(got, Failure) or (seen is not None and got != seen):
            self.disarmed = True
            return
        self.first[route], self.count = got, self.count + 1

    def decided(self) -> dict[str, Any] | None:
        """run.json's ``abort`` once the first attempts all failed alike (on every route), else None."""
        if self.disarmed or not all(route in self.first for route in self.routes):
            return None
        failure = self.first[self.routes[0]]
        refused = all(f.refused for f in self.first.values())
        if self.count < (self.refused_after if refused else self.after):
            return None
        return decision(failure, self.count)

    def look(self, elapsed_s: float) -> dict[str, Any] | None:
        """The decision with the time it was taken (``at_s``), or None to go on."""
        found = self.decided()
        return None if found is None else {**found, "at_s": round(elapsed_s, 3)}
