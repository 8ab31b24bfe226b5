"""``plan --find-limit``'s answer: per replica count, the load each tier carries (pure; rows, lines, Markdown).

Each row is one simulated find-limit run's ``find_limit`` (run.json, a file: read with defaults, a malformed
field shows as ``-``)."""

from __future__ import annotations

from typing import Any

from rushhour.reports.limit import lines as limit_lines


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def tiers_of(rows: list[dict[str, Any]]) -> list[str]:
    """Every watched tier any row names, sorted."""
    names: set[str] = set()
    for row in rows:
        tiers = _dict(row.get("found")).get("tiers")
        if isinstance(tiers, dict):
            names.update(map(str, tiers))
    return sorted(names)


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The header and one line per replica count: status, binding tier and check, each tier's bracket in /s."""
    tiers = tiers_of(rows)
    header = ["replicas", "status", "binds first"] + [h for t in tiers for h in (f"{t} holds up to (mix /s)",
                                                                                  f"{t} fails at (mix /s)")]
    body = []
    for row in rows:
        found = _dict(row.get("found"))
        binding, own = _dict(found.get("binding")), _dict(found.get("tiers"))
        cells = [str(row.get("replicas", "-")), str(found.get("status", "-")),
                 f"{binding.get('tier')} {binding.get('check')}" if binding else "-"]
        for t in tiers:
            mine = _dict(own.get(t))
            cells += [_num(mine.get("low_rps")), _num(mine.get("high_rps"))]
        body.append(cells)
    return header, body


def sentences(rows: list[dict[str, Any]]) -> list[str]:
    """One line per replica count: the find-limit sentence of its run."""
    return [f"{row.get('replicas')} replica(s): {limit_lines(_dict(row.get('found')))[0]}" for row in rows]


def markdown(rows: list[dict[str, Any]], notes: list[str]) -> str:
    """plan-limit.md: the table, the sentences, each run's folder, the notes."""
    header, body = table(rows)
    out = ["# The load each tier carries, per cluster size (plan --find-limit)", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cells) + " |" for cells in body]
    out += ["", *[f"- {line}" for line in sentences(rows)], ""]
    out += [f"- {row.get('replicas')} replica(s): `{row.get('run_dir', '-')}`" for row in rows]
    if notes:
        out += ["", *[f"Note: {n}" for n in notes]]
    return "\n".join(out) + "\n"
