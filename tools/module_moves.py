"""Rewrite references to modules that moved (``rushhour.loadgen.record`` → ``rushhour.records.record``).

Usage: ``python tools/module_moves.py [FILE_OR_FOLDER ...]`` (default: every tracked file of the checkout).
Idempotent: a rule matches only an old name, so it can run again after merging a branch written before the
move. It rewrites dotted module names anywhere in code and docs (imports, lazy imports, ``-m`` commands,
``mock.patch`` targets), ``from rushhour.PKG import MOD`` of a moved module, and the folder paths docs name
(``loadgen/record.py``); then ``ruff`` re-sorts the touched Python files' imports. It prints what it changed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# old module → new module, under the rushhour namespace; the one table of what moved where
MOVES: dict[str, str] = {
    "loadgen.record": "records.record",
    "loadgen.columns": "records.columns",
    "loadgen.manifest": "records.manifest",
    "audit.knee": "studies.knee",
    "audit.plan": "studies.plan",
    "audit.boundary": "studies.boundary",
    "audit.compare": "studies.compare",
    "audit.repeat": "studies.repeat",
    "audit.history": "studies.history",
    "audit.between": "studies.between",
    "loadgen.sweep": "studies.sweep",
}
SUFFIXES = {".py", ".md", ".sh", ".toml", ".cfg", ".yaml", ".yml", ".txt"}
NAMES = {"Makefile", "Dockerfile"}
SKIP = {"tools/module_moves.py", "tools/namespace_rewrite.py"}


def _dotted(old: str, new: str) -> tuple[re.Pattern[str], str]:
    """``rushhour.loadgen.record`` (not ``…record_x``) → the new dotted name."""
    return re.compile(rf"\brushhour\.{re.escape(old)}(?![\w])"), f"rushhour.{new}"


def _path(old: str, new: str) -> tuple[re.Pattern[str], str]:
    """``loadgen/record.py`` in prose and commands → the new path (never inside a longer path)."""
    return re.compile(rf"(?<![\w/.]){re.escape(old.replace('.', '/'))}\.py\b"), new.replace(".", "/") + ".py"


_RULES = [rule(o, n) for o, n in MOVES.items() for rule in (_dotted, _path)]
_FROM = re.compile(r"^(\s*)from rushhour\.(\w+) import ([^\n(]+)$", re.M)


def _split_from(match: re.Match[str]) -> str:
    """``from rushhour.loadgen import columns as c, runner`` with the moved names imported from their new home."""
    indent, package, names = match.group(1), match.group(2), match.group(3)
    comment = ""
    if "#" in names:
        names, comment = names.split("#", 1)
        comment = "  #" + comment
    kept: list[str] = []
    moved: dict[str, list[str]] = {}
    for item in (n.strip() for n in names.split(",") if n.strip()):
        target = MOVES.get(f"{package}.{item.split()[0]}")
        if target is None:
            kept.append(item)
        else:
            new_package, new_name = target.rsplit(".", 1)
            moved.setdefault(new_package, []).append(item.replace(item.split()[0], new_name, 1))
    if not moved:
        return match.group(0)
    lines = [f"from rushhour.{package} import {', '.join(kept)}"] if kept else []
    lines += [f"from rushhour.{p} import {', '.join(items)}" for p, items in moved.items()]
    lines[0] += comment
    return "\n".join(indent + line for line in lines)


def rewrite(text: str) -> str:
    """The text with every moved module named by its new name (pure)."""
    text = _FROM.sub(_split_from, text)
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def _files(args: list[str]) -> list[Path]:
    """The files to rewrite: the arguments (folders walked) or every tracked file."""
    if not args:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
        paths = [ROOT / line for line in listed.stdout.splitlines()]
    else:
        paths = []
        for arg in map(Path, args):
            paths += sorted(p for p in arg.rglob("*") if p.is_file()) if arg.is_dir() else [arg]
    return [p for p in paths if (p.suffix in SUFFIXES or p.name in NAMES) and not p.is_symlink()
            and str(p.resolve().relative_to(ROOT)) not in SKIP and "fixtures" not in p.parts]


def main(args: list[str]) -> int:
    """Rewrite the files, re-sort imports of the changed Python files, print each changed path."""
    changed = []
    for path in _files(args):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    py = [str(p) for p in changed if p.suffix == ".py"]
    if py:
        subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--quiet", "--select", "I", "--fix",
                        *py], cwd=ROOT, check=False)
    for path in changed:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
