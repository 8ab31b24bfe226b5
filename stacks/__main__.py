"""``python -m rushhour.stacks``: the profiles and their rules as Markdown tables (docs/audit.md, docs/scenarios.md)."""

from __future__ import annotations

import sys

from rushhour.stacks.common import COMMON_STATUS_DEFAULTS
from rushhour.stacks.registry import STACKS


def rules_markdown() -> str:
    """Every profile's rules in order, then its status defaults: docs/audit.md's rules table."""
    lines = ["| profile | order | pattern | status | first token | class | why |", "|---|---|---|---|---|---|---|"]
    for profile in STACKS:
        for order, rule in enumerate(profile.rules, 1):
            statuses = ",".join(str(s) for s in rule.statuses) if rule.statuses else "any"
            first = "" if rule.first_token is None else str(rule.first_token).lower()
            pattern = f"`{rule.pattern}`" if rule.pattern else ""
            lines.append(f"| {profile.name} | {order} | {pattern} | {statuses} | {first} | {rule.cls} | {rule.note} |")
        for status, cls in profile.status_defaults.items():
            lines.append(f"| {profile.name} | default |  | {status} |  | {cls} | status default |")
    for status, cls in COMMON_STATUS_DEFAULTS.items():
        lines.append(f"| * | default |  | {status} |  | {cls} | common status default (every profile) |")
    return "\n".join(lines)


def profiles_markdown() -> str:
    """One row per profile: names, wire, testbed imitation (docs/scenarios.md)."""
    lines = ["| profile | stack | also named (testbed) | testbed imitation |", "|---|---|---|---|"]
    for p in STACKS:
        aliases = ", ".join(f"`{a}` ({t})" for a, t in p.aliases)
        lines.append(f"| `{p.name}` | {p.summary} | {aliases} | {p.testbed} |")
    return "\n".join(lines)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "rules"
    print(rules_markdown() if which == "rules" else profiles_markdown())
