"""Rewrite imports of rushhour's old top-level packages to the one installed namespace (``audit`` → ``rushhour.audit``).

Usage: ``python tools/namespace_rewrite.py [FILE_OR_FOLDER ...]`` (default: every tracked file of the checkout).
Idempotent: every rule matches only an old name (``audit…``), never a rewritten one (``rushhour.audit…``), so it
can run again after merging a branch written with the old imports. It rewrites import statements (also those
inside strings of code), ``-m audit…`` commands, and strings that are exactly a module name (``"loadgen.runner"``,
``mock.patch("loadgen.runner.x")`` targets); then ``ruff`` re-sorts the touched files' imports. It prints the
files it changed and exits 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("stacks", "scenarios", "records", "loadgen", "testbed", "audit", "studies", "reports", "sim")
P = "(?:" + "|".join(PACKAGES) + ")"
NAME = rf"{P}(?:\.\w+)*"
# Text files whose commands or code samples name modules; the script itself and recorded fixtures are left alone.
SUFFIXES = {".py", ".md", ".sh", ".toml", ".cfg", ".yaml", ".yml"}
NAMES = {"Makefile", "Dockerfile"}
SKIP = {"tools/namespace_rewrite.py"}
LINE_LENGTH = 120  # pyproject's [tool.ruff]
# Files whose strings name *layers* (package folders), not import paths: only their import statements change.
LAYER_TABLES = {"tests/foundation/test_architecture.py"}

_FROM = re.compile(rf"^(\s*)from ({NAME}) import ", re.M)
_IMPORT = re.compile(r"^(\s*)import ([\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)[ \t]*(#.*)?$", re.M)
# code inside a string: "from loadgen.x import y\n", "import sys; from loadgen.x import y", "    import stacks\n"
_STR_FROM = re.compile(rf"((?:[\"']|\\n|;)[ \t]*)from ({NAME}) import ")
_STR_IMPORT = re.compile(rf"((?:[\"']|\\n)[ \t]*)import ({P})(?=\\n|[\"';])")
_DASH_M = re.compile(rf"(?<![\w-])-m ({NAME})\b")
_ARG_M = re.compile(rf"([\"']-m[\"'],\s*[\"'])({NAME})([\"'])")
_FSTRING = re.compile(rf"(\bf[\"'])({P})\.(?=\{{)")  # f"stacks.{name}"
_WHOLE = re.compile(rf"([\"'])({P}(?:\.\w+)+)([\"'])")


def _is_module_path(dotted: str) -> bool:
    """``loadgen.engine.doctor`` names a module of the checkout (``testbed.log`` or ``audit.md`` does not)."""
    parts = dotted.split(".")
    folder = ROOT.joinpath(*parts[:2])
    return folder.is_dir() or folder.with_suffix(".py").is_file()


def _imports(match: re.Match[str]) -> str:
    """``import a.b, stacks`` as the new names, keeping what each statement binds."""
    indent, names, comment = match.group(1), match.group(2), match.group(3)
    kept, lines = [], []
    for item in (n.strip() for n in names.split(",")):
        module = item.split()[0]
        top = module.split(".")[0]
        if top not in PACKAGES:
            kept.append(item)
        elif " as " in item:
            kept.append("rushhour." + item)
        elif module == top:  # `import stacks` binds `stacks`
            lines.append(f"from rushhour import {top}")
        elif comment and "F401" in comment:  # loaded for its side effect, the name unused
            lines.append(f"import rushhour.{module}")
        else:  # `import audit.compare` binds `audit` and loads audit.compare
            lines += [f"import rushhour.{module}  # noqa: F401 - loads it; used as {module}",
                      f"from rushhour import {top}"]
    if not lines and all(not k.startswith("rushhour.") for k in kept):
        return match.group(0)
    if kept:
        lines.insert(0, "import " + ", ".join(kept))
    if comment:
        lines[0] = lines[0].split("  # noqa")[0] + "  " + comment
    return "\n".join(indent + line for line in lines)


def rewrite(text: str, path: str) -> str:
    """The text with every old top-level module name rewritten (pure)."""
    text = _FROM.sub(r"\1from rushhour.\2 import ", text)
    text = _IMPORT.sub(_imports, text)
    text = _STR_FROM.sub(r"\1from rushhour.\2 import ", text)
    text = _STR_IMPORT.sub(r"\1from rushhour import \2", text)
    text = _DASH_M.sub(r"-m rushhour.\1", text)
    text = _ARG_M.sub(r"\1rushhour.\2\3", text)
    text = _FSTRING.sub(r"\1rushhour.\2.", text)
    if path.endswith(".py") and path not in LAYER_TABLES:
        text = _WHOLE.sub(lambda m: (m.group(1) + "rushhour." + m.group(2) + m.group(3))
                          if _is_module_path(m.group(2)) else m.group(0), text)
    return text


def _files(args: list[str]) -> list[Path]:
    if not args:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [ROOT / line for line in listed.splitlines()]
    out: list[Path] = []
    for arg in map(Path, args):
        out += sorted(p for p in arg.rglob("*") if p.is_file()) if arg.is_dir() else [arg]
    return out


def main(argv: list[str]) -> int:
    changed: list[Path] = []
    for path in _files(argv):
        rel = str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
        if path.is_symlink() or rel in SKIP or not (path.suffix in SUFFIXES or path.name.split(".")[0] in NAMES):
            continue
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        new = rewrite(text, rel)
        if new != text:
            path.write_text(new)
            changed.append(path)
    py = [str(p) for p in changed if p.suffix == ".py"]
    if py:  # the new names sort differently (`rushhour` < `rushhour.audit`): ruff's isort puts them in order
        ruff = Path(sys.executable).with_name("ruff")
        subprocess.run([str(ruff) if ruff.exists() else "ruff", "check", "-q", "--select", "I001", "--fix", *py],
                       cwd=ROOT, check=False)
    for path in changed:
        print(path)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if len(line) > LINE_LENGTH and "rushhour." in line:
                print(f"  {path}:{number}: longer than {LINE_LENGTH} characters now: wrap it by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
