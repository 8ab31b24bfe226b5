"""Function tools an agent persona offers the model: a small built-in coding set, or the scenario's own."""

from __future__ import annotations

from typing import Any


def _fn(name: str, description: str, **props: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
                "required": list(props),
            },
        },
    }


# What a coding agent's harness typically exposes (read, search, edit, run): the shapes only matter for
# the bytes and tokens they add to every request, and for a stack whose model calls them.
BUILTIN_TOOLS: list[dict[str, Any]] = [
    _fn("read_file", "Read a file of the repository.", path="path relative to the repository root"),
    _fn("search_code", "Search the repository for a regular expression.", pattern="a regular expression"),
    _fn("edit_file", "Replace text in a file.", path="the file", old="text to replace", new="replacement"),
    _fn("run_command", "Run a shell command in the sandbox and return its output.", command="the command"),
]


def check_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools: each ``{type: function, function: {name, parameters?}}`` (one-line errors)."""
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise ValueError(f"tools[{i}]: expected {{type: function, function: {{name, parameters}}}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tools[{i}].function.name: a non-empty string is required")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise ValueError(f"tools[{i}].function.parameters: a JSON Schema object is required")
    return tools
