"""Load scenario YAML with errors that name the file, the line and the field, and suggest a fix."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rushhour.scenarios.model import CROSS_REFERENCE, Scenario, parse_duration, span_problems
from rushhour.scenarios.names import did_you_mean
from rushhour.scenarios.references import reference_problems

LIBRARY_DIR = Path(__file__).parent / "library"

# A scenario is a page or two of YAML. These limits refuse hostile documents before any expansion:
# an alias bomb ("billion laughs") is a few hundred bytes that expand to billions of nodes, and deep
# nesting overflows the composer's recursion. Both are checked on the composed node graph, where an
# alias is one shared node, so the check itself costs no more than the file's own size.
MAX_SCENARIO_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 32  # the deepest real scenario (a mixture inside a persona inside a list) is ~8
MAX_NODES = 100_000  # YAML nodes after aliases are expanded; the largest library scenario has ~600

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scenario, located in its file."""

    field: str
    line: int | None
    message: str
    hint: str = ""

    def render(self, path: str) -> str:
        where = f"{path}:{self.line}" if self.line else path
        text = f"{where}: {self.field or '(top level)'}: {self.message}"
        return text + (f" — {self.hint}" if self.hint else "")


class ScenarioError(ValueError):
    """A scenario that cannot be used; ``str()`` is a one-screen, human error report."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        lines = [f"invalid scenario {path} ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"]
        lines += ["  " + p.render(path) for p in problems[:20]]
        if len(problems) > 20:
            lines.append(f"  … and {len(problems) - 20} more")
        super().__init__("\n".join(lines))


class _TooLarge(yaml.MarkedYAMLError):
    """A document refused for its shape (depth, expanded size), before anything is constructed."""


class _LineLoader(yaml.SafeLoader):
    """A safe loader that remembers the line of every mapping key and sequence item.

    It also bounds nesting depth while composing and the alias-expanded size before constructing.
    """

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _TooLarge(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return self.construct_document(node)


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose alias-expanded size or depth is over the limits (or that is cyclic)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    active: set[int] = set()

    def visit(node: yaml.Node) -> None:
        key = id(node)
        if key in size:
            return
        if key in active:
            raise _TooLarge(None, None, "an alias refers to the collection that contains it", node.start_mark)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        active.add(key)
        for child in children:
            visit(child)
        active.discard(key)
        size[key] = 1 + sum(size[id(c)] for c in children)
        depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
        if size[key] > MAX_NODES:
            raise _TooLarge(None, None, f"aliases expand to more than {MAX_NODES} nodes (an alias bomb?)",
                            node.start_mark)
        if depth[key] > MAX_DEPTH:
            raise _TooLarge(None, None, f"aliases nest deeper than {MAX_DEPTH} levels", node.start_mark)

    visit(root)


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise yaml.MarkedYAMLError(
                "while reading a mapping", node.start_mark, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[key] = key_node.start_mark.line + 1
    return _Mapping(mapping, lines, node.start_mark.line + 1)


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> list[Any]:
    items = [loader.construct_object(child, deep=True) for child in node.value]
    return _Sequence(items, [child.start_mark.line + 1 for child in node.value], node.start_mark.line + 1)


class _Mapping(dict[Any, Any]):
    def __init__(self, data: dict[Any, Any], lines: dict[Any, int], line: int) -> None:
        super().__init__(data)
        self.lines = lines
        self.line = line


class _Sequence(list[Any]):
    def __init__(self, data: list[Any], lines: list[int], line: int) -> None:
        super().__init__(data)
        self.lines = lines
        self.line = line


# YAML 1.2 booleans: only true/false. YAML 1.1 also reads on/off/yes/no as booleans, which turns
# `retries: {on: [429]}` into a `True` key and `service_tier: no` into False.
_LineLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_LineLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
# YAML 1.2 floats: `1e9` is a number (YAML 1.1 wants `1.0e+9` and reads `1e9` as a string, which then
# slips past a numeric limit as a confusing type error).
_LineLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in _LineLoader.yaml_implicit_resolvers.items()
}
_LineLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _line_of(doc: Any, loc: Loc) -> int | None:
    """The deepest line we know for a pydantic error location (tagged-union tags are skipped)."""
    node, line = doc, getattr(doc, "line", None)
    for part in loc:
        if isinstance(node, _Mapping) and part in node:
            line = node.lines.get(part, line)
            node = node[part]
        elif isinstance(node, _Sequence) and isinstance(part, int) and part < len(node):
            line = node.lines[part]
            node = node[part]
        elif isinstance(node, _Mapping | _Sequence):
            continue  # a union tag such as 'chat' or 'lognormal' sits in the loc but not in the data
        else:
            break
    return line


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model reachable inside a type annotation (unions, lists, Annotated)."""
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item not in found:  # Annotated[X | Y] exposes its union twice (origin and args)
                found.append(item)
            continue
        stack.extend(getattr(item, "__args__", ()) or ())
        origin = getattr(item, "__origin__", None)
        if origin is not None and getattr(item, "__metadata__", None):
            stack.append(origin)
    return found


def _tag_of(model: type[BaseModel]) -> set[str]:
    tags: set[str] = set()
    for name in ("kind", "dist"):
        field = model.model_fields.get(name)
        if field is not None:
            tags.update(str(a) for a in getattr(field.annotation, "__args__", ()) or ())
    return tags


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of ``loc`` (to suggest valid keys)."""
    candidates: list[type[BaseModel]] = [Scenario]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        tagged = [m for m in candidates if part in _tag_of(m)]
        if tagged:
            candidates = tagged
            continue
        owners = [m for m in candidates if part in m.model_fields]
        if not owners:
            return None
        candidates = _models_in(owners[0].model_fields[str(part)].annotation)
    return candidates[0] if len(candidates) == 1 else None


def _problem(doc: Any, error: Any) -> Problem:
    loc: Loc = tuple(error["loc"])
    field = ".".join(str(p) for p in loc)
    message = error["msg"]
    hint = ""
    if error["type"] == "extra_forbidden":
        model = _model_at(loc)
        key = str(loc[-1])
        message = f"unknown key {key!r}"
        if model is not None:
            valid = list(model.model_fields)
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(valid)}"
    elif error["type"] in ("literal_error", "union_tag_invalid"):
        ctx = error.get("ctx", {})
        expected = ctx.get("expected") or ctx.get("expected_tags", "")
        got = ctx.get("tag", error.get("input"))
        options = [o.strip(" '") for o in str(expected).replace(" or ", ",").split(",") if o.strip(" '")]
        message = f"{got!r} is not one of {expected}"
        hint = did_you_mean(str(got), options, cutoff=0.5) if got is not None else ""
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] in ("float_parsing", "float_type", "int_parsing", "int_type"):
        message, hint = _unit_hint(loc, error.get("input"), message)
    elif error["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    return Problem(field=field, line=_line_of(doc, loc), message=message, hint=hint)


def _unit_hint(loc: Loc, value: Any, message: str) -> tuple[str, str]:
    """A duration where a number of milliseconds is wanted (``p99: 2s``): say the unit and the number meant."""
    in_ms = any(isinstance(part, str) and part.endswith("_ms") for part in loc)
    if not in_ms or not isinstance(value, str):
        return message, ""
    try:
        seconds = parse_duration(value)
    except ValueError:
        return f"{value!r} is not a number", "milliseconds expected"
    return f"{value!r} is not a number", f"milliseconds expected: {seconds * 1000:g}"


def load_yaml(text: str, path: str = "<yaml>") -> Any:
    """Any rushhour YAML (a scenario, an SLO file) as plain data, under the same limits as a scenario:
    size, nesting depth and alias expansion; YAML 1.2 booleans and numbers. Raises ``ScenarioError``."""
    return _plain(_load_doc(text, path))


def _load_doc(text: str, path: str) -> Any:
    if len(text) > MAX_SCENARIO_BYTES:
        raise ScenarioError(path, [Problem("", None, f"larger than {MAX_SCENARIO_BYTES // 1024} KiB")])
    try:
        return yaml.load(text, Loader=_LineLoader)
    except _TooLarge as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise ScenarioError(path, [Problem("", line, f"YAML refused: {exc.problem}")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise ScenarioError(path, [Problem("", line, f"YAML syntax: {exc.problem}")]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(path, [Problem("", None, f"YAML syntax: {exc}")]) from None


def parse_scenario(text: str, path: str = "<scenario>") -> Scenario:
    """Validate scenario YAML text; raises ``ScenarioError`` with located problems."""
    doc = _load_doc(text, path)
    if not isinstance(doc, dict):
        raise ScenarioError(path, [Problem("", 1, "a scenario is a YAML mapping (name:, tiers:, personas:, …)")])
    # names one part gives another are checked on the YAML itself, so they come with every field error at
    # once, each at its own line (the model checks them only once all its fields are valid)
    references = [Problem(".".join(map(str, r.loc)), _line_of(doc, r.loc), r.message, r.hint)
                  for r in reference_problems(doc) + span_problems(doc)]
    try:
        scenario = Scenario.model_validate(_plain(doc))
    except ValidationError as exc:
        problems = [_problem(doc, err) for err in exc.errors()
                    if not (references and err["type"] == CROSS_REFERENCE)]
        raise ScenarioError(path, _by_line(_dedupe(problems + references))) from None
    if references:  # the model found none: it cannot be, but a located problem is never dropped
        raise ScenarioError(path, references)
    return scenario


def _by_line(problems: list[Problem]) -> list[Problem]:
    """Problems in the file's order (those with no line first: they concern the whole file)."""
    return sorted(problems, key=lambda p: p.line or 0)


def validate_data(data: dict[str, Any], what: str) -> Scenario:
    """A scenario built in code from plain data, checked like a file; ``what`` names the change that made it
    (``--scale 4``) in the one-line-per-problem error, as a file name would."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(what, _dedupe([_problem(None, err) for err in exc.errors()])) from None


def revalidate(scenario: Scenario, what: str) -> Scenario:
    """A scenario changed in code (``model_copy`` skips validation) checked against every limit again."""
    return validate_data(scenario.model_dump(), what)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[str, str]] = set()
    unique = []
    for problem in problems:
        key = (problem.field, problem.message)
        if key not in seen:
            seen.add(key)
            unique.append(problem)
    return unique


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def resolve_scenario_path(name: str | Path) -> Path:
    """A path as given, else a name in the built-in library (``demo`` → library/demo.yaml)."""
    path = Path(name)
    if path.exists():
        return path
    for candidate in (LIBRARY_DIR / f"{name}.yaml", LIBRARY_DIR / str(name)):
        if candidate.exists():
            return candidate
    builtins = sorted(p.stem for p in LIBRARY_DIR.glob("*.yaml"))
    near = did_you_mean(Path(name).stem, builtins)
    hint = f": {near}" if near else ""
    raise FileNotFoundError(f"no scenario file {str(name)!r}{hint} (built-in scenarios: {', '.join(builtins)})")


def read_scenario_text(path: Path) -> str:
    """A scenario file's text; a directory, an unreadable, huge or binary file is a ``ScenarioError``."""
    try:
        if path.is_dir():
            raise ScenarioError(str(path), [Problem("", None, "is a directory, not a scenario file")])
        with path.open("rb") as handle:
            raw = handle.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise ScenarioError(str(path), [Problem("", None, f"cannot read: {exc.strerror or exc}")]) from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(str(path), [Problem("", None, f"larger than {MAX_SCENARIO_BYTES // 1024} KiB: "
                                                          "not a scenario")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(str(path), [Problem("", None, f"not UTF-8 text (byte {exc.start}): "
                                                          "a scenario is a YAML file")]) from None
    if "\x00" in text:
        raise ScenarioError(str(path), [Problem("", None, "binary data (a NUL byte): a scenario is a YAML file")])
    return text


def located(where: str, problems: list[Problem]) -> list[Problem]:
    """Problems found after loading (a trace not found, a tier that cannot be mapped) with the line of their field
    in the scenario file ``where`` names; as they are when it names none (an option such as ``--profile``)."""
    if all(p.line for p in problems):
        return problems
    try:
        path = resolve_scenario_path(where)
        doc = _load_doc(read_scenario_text(path), str(path))
    except (OSError, ScenarioError):
        return problems
    return [p if p.line or not p.field else replace(p, line=_line_of(doc, _loc_of(doc, p.field))) for p in problems]


def _loc_of(doc: Any, field: str) -> Loc:
    """A dotted field path as a location in the YAML: list items by index or by their ``name``."""
    loc: list[str | int] = []
    node = doc
    for part in field.split("."):
        if isinstance(node, list):
            names = [item.get("name") if isinstance(item, dict) else None for item in node]
            index = int(part) if part.isdigit() else (names.index(part) if part in names else None)
            if index is None or index >= len(node):
                break
            loc.append(index)
            node = node[index]
        elif isinstance(node, dict) and part in node:
            loc.append(part)
            node = node[part]
        else:
            break
    return tuple(loc)


def load_scenario(name: str | Path) -> Scenario:
    path = resolve_scenario_path(name)
    return parse_scenario(read_scenario_text(path), str(path))


def json_schema() -> str:
    """JSON Schema of the scenario format, for editor completion (yaml-language-server)."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rushhour scenario"
    return json.dumps(schema, indent=2)
