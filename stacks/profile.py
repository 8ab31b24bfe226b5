"""The shape of one stack profile: wire mapping, classification rules, reason headers, metrics, testbed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

PriorityPolarity = Literal["negated", "as_is"]


@dataclass(frozen=True)
class Rule:
    """``statuses`` (None = any) and ``pattern`` (regex on the haystack) and ``first_token`` → ``cls``.

    The haystack is the record's reason, error text and in-band error joined by `` | ``; the match is
    case-insensitive. ``note`` cites where the text comes from (a file of the stack's source, an observation).
    ``finding`` (optional) names the cause and its fix in one line: the audit and the doctor report every
    answer this rule matched under it, instead of a wall of anonymous ``failed`` (a configuration error).
    """

    cls: str
    pattern: str | None = None
    statuses: tuple[int, ...] | None = None
    first_token: bool | None = None
    note: str = ""
    finding: str = ""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z_]+", self.cls):
            raise ValueError(f"bad class name {self.cls!r}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern, re.IGNORECASE)
            except re.error as exc:
                raise ValueError(f"rule for {self.cls}: bad pattern {self.pattern!r}: {exc}") from exc

    def matches(self, haystack: str, status: int, first_token: bool) -> bool:
        """Whether this rule decides an answer with these facts."""
        if self.statuses is not None and status not in self.statuses:
            return False
        if self.first_token is not None and self.first_token != first_token:
            return False
        return self.pattern is None or _regex(self.pattern).search(haystack) is not None


_COMPILED: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    if pattern not in _COMPILED:
        _COMPILED[pattern] = re.compile(pattern, re.IGNORECASE)
    return _COMPILED[pattern]


@dataclass(frozen=True)
class Wire:
    """How a tier travels to this stack: headers and body fields (rushhour's priority: higher = more urgent)."""

    objective_header: str | None = None  # value: the tier's objective name (llm-d InferenceObjective)
    fairness_header: str | None = None  # value: the tenant (fairness ID)
    priority_header: str | None = None  # value: the tier's objective name (SMG x-smg-priority)
    priority_body: PriorityPolarity | None = None  # body ``priority``: negated (lower = earlier) or as is
    # ``extra_body.priority``: what a gateway passes on to the model server behind it (LiteLLM → vLLM)
    priority_extra_body: PriorityPolarity | None = None
    service_tier: bool = False  # send the tier's ``service_tier`` body field (OpenAI, Anthropic)
    anthropic_auth: bool = False  # x-api-key + anthropic-version instead of a bearer token
    pin_output: bool = False  # body min_tokens = max_tokens + ignore_eos pin the output length (vLLM, SGLang)
    # the priority the stack gives a request without an objective/priority header, or with one it does not
    # know (llm-d, GAIE: 0, stacks.md §1): where the priority control's twins land on a header stack
    default_priority: int | None = None


HeaderReader = Callable[[Mapping[str, str], int], "str | None"]


@dataclass(frozen=True)
class CounterCheck:
    """One server counter compared with the client's count of the same event, as a delta over the run.

    ``client`` names what the client counts: ``served``, ``admitted`` or an outcome class;
    ``select`` keeps samples whose labels have these values; ``exclude`` drops samples with these
    values (e.g. vLLM's ``finished_reason=abort``); ``by`` is the label that carries the tier, if any
    (``priority`` on llm-d, ``api_key_alias``/``team`` on a gateway), else the check is in total.
    """

    client: str
    metric: str
    alternatives: tuple[str, ...] = ()  # older names of the same counter: the first one scraped is used
    select: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    exclude: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    by: str | None = None
    note: str = ""
    # a client count of attempts the server may have counted here or not, which widens the tolerance: ``cut``
    # (2xx streams cut before their end marker) for a kill the client cannot tell from a network cut
    unsure: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """The counter's name and its alternatives, in order of preference."""
        return (self.metric, *self.alternatives)


@dataclass(frozen=True)
class Metrics:
    """What the scraper keeps from this stack's ``/metrics`` and what the audit compares."""

    prefixes: tuple[str, ...] = ()  # families kept whole by name prefix
    names: tuple[str, ...] = ()  # single families kept by exact name (with or without ``_total``)
    checks: tuple[CounterCheck, ...] = ()
    path: str = "/metrics"  # the default path under the target URL
    # the label that names a tenant in the stack's per-tenant series, and how many values it keeps before it
    # lumps later tenants together (llm-d: fairness_id, 1,000, then "other"); None: no such cap known
    fairness_label: str | None = None
    fairness_cap: int | None = None
    fairness_families: tuple[str, ...] = ()  # the per-tenant series the audit reads the label from

    def keeps(self, name: str) -> bool:
        """Whether the scraper keeps a sample of this name (never a ``_created`` timestamp)."""
        if name.endswith("_created"):
            return False
        return name.startswith(self.prefixes) or name in self.names or _base(name) in self.names


def _base(name: str) -> str:
    for suffix in ("_total", "_created", "_count", "_sum", "_bucket"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


@dataclass(frozen=True)
class StackProfile:
    """Everything rushhour knows about one serving stack, in one place (``stacks/<name>.py``)."""

    name: str
    summary: str
    wire: Wire = field(default_factory=Wire)
    rules: tuple[Rule, ...] = ()
    status_defaults: Mapping[int, str] = field(default_factory=dict)
    reason_headers: tuple[str, ...] = ()  # response headers whose value is the drop reason, in order
    read_reason: HeaderReader | None = None  # a custom reader when one header is not enough
    metrics: Metrics = field(default_factory=Metrics)
    testbed: str = "vllm"  # the testbed profile that imitates this stack
    aliases: tuple[tuple[str, str], ...] = ()  # (other scenario name for this stack, the testbed it starts)

    def header_reason(self, headers: Mapping[str, str], status: int) -> str | None:
        """The drop reason this stack put in the response headers, if any."""
        if self.read_reason is not None:
            return self.read_reason(headers, status)
        for name in self.reason_headers:
            value = headers.get(name)
            if value:
                return str(value)
        return None

    def rule_for(self, haystack: str, status: int, first_token: bool) -> Rule | None:
        """The first rule that matches, or None."""
        for rule in self.rules:
            if rule.matches(haystack, status, first_token):
                return rule
        return None

    def classify(self, haystack: str, status: int, first_token: bool) -> str | None:
        """The class of the first rule that matches, or None."""
        rule = self.rule_for(haystack, status, first_token)
        return None if rule is None else rule.cls
