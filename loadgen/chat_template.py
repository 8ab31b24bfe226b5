"""A model's chat template: compiled in jinja2's immutable sandbox and rendered within caps of time and size.

A template is code from a model folder: a loop can run for ever and a few bytes can build gigabytes
(``'x' * 10**10``, a string doubled in a loop). Every render here runs under the same caps: a wall-time
limit (SIGALRM, on the main thread), a cap on what it writes, and a cap on every value an operator, a
``~``, a call or a filter makes, checked before the value is built where its size can be known first.
"""

from __future__ import annotations

import contextlib
import math
import signal
from collections.abc import Callable, Iterator
from typing import Any

from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import loopcontrols
from jinja2.nodes import Concat
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rushhour.loadgen.token_size import BYTES_PER_TOKEN
from rushhour.scenarios.model import MAX_TOKENS

# a rendered prompt holds at most one prompt's text (MAX_TOKENS at BYTES_PER_TOKEN) and its framing: 4× that
MAX_RENDER_BYTES = 4 * MAX_TOKENS * BYTES_PER_TOKEN
MAX_RENDER_S = 5.0  # real templates render in milliseconds; the load process stalls while one renders


class TemplateError(ValueError):
    """A template that cannot be compiled or goes over a cap (one line, without the file: the caller names it)."""


class _Timeout(BaseException):
    """Raised by the alarm inside a render (a BaseException: the template's own code cannot catch it)."""


def _length(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple | dict) else 0


def _check(value: Any, what: str) -> Any:
    if _length(value) > MAX_RENDER_BYTES:
        raise TemplateError(f"{what} builds a value of {_length(value):,} items, over the cap of {MAX_RENDER_BYTES:,}")
    return value


def _check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse before computing when the result of ``left op right`` would be over the cap."""
    if op == "*":
        count = right if isinstance(right, int) else left if isinstance(left, int) else None
        other = left if count is right else right
        if count is not None and _length(other) * max(0, count) > MAX_RENDER_BYTES:
            built = _length(other) * count
            raise TemplateError(f"'*' would build {built:,} items, over the cap of {MAX_RENDER_BYTES:,}")
    elif op == "**" and isinstance(left, int | float) and isinstance(right, int | float):
        if abs(left) > 1 and right * math.log2(abs(left)) > 4096:  # a 4096-bit number is already absurd
            raise TemplateError(f"'**' would build a number of more than 4096 bits ({left!r} ** {right!r})")
    elif op == "+" and _length(left) + _length(right) > MAX_RENDER_BYTES:
        raise TemplateError(f"'+' would build {_length(left) + _length(right):,} items, over the cap")


class _Codegen(CodeGenerator):
    """jinja2's code generator, with ``~`` (concatenation) sent through the environment's size check."""

    def visit_Concat(self, node: Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' (and so vLLM's) template environment, every operator, call, filter and ``~`` size-checked."""

    code_generator_class = _Codegen
    intercepted_binops = frozenset({"*", "**", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols], **options)
        self.filters = {name: _guarded(name, f) for name, f in self.filters.items()}

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """``left operator right``, refused before it is computed when its result would be over the cap."""
        _check_binop(operator, left, right)
        return _check(super().call_binop(context, operator, left, right), f"'{operator}'")

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # jinja2's own signature
        """A call from the template: counts and widths over the cap are refused before the call, results after."""
        _check_arguments(getattr(__obj, "__name__", "a call"), args, kwargs)
        return _check(super().call(__context, __obj, *args, **kwargs), getattr(__obj, "__name__", "a call"))

    def bounded_concat(self, parts: tuple[Any, ...]) -> str:
        """``a ~ b``: refused when the joined text would be over the cap."""
        texts = [str(p) for p in parts]
        if sum(len(t) for t in texts) > MAX_RENDER_BYTES:
            raise TemplateError(f"'~' would build {sum(len(t) for t in texts):,} characters, over the cap")
        return "".join(texts)


def _check_arguments(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A number argument (a width, a count) or, for ``replace``, the text it could build, over the cap."""
    values = [*args, *kwargs.values()]
    if name == "join":  # the joined size is known from the parts before they are joined
        for value in values:
            if isinstance(value, list | tuple) and sum(_length(v) for v in value) > MAX_RENDER_BYTES:
                raise TemplateError(f"join would build more than {MAX_RENDER_BYTES:,} characters, over the cap")
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RENDER_BYTES:
            raise TemplateError(f"{name}({value:,}) is over the cap of {MAX_RENDER_BYTES:,}")
    if name == "replace" and len(values) >= 3 and all(isinstance(v, str) for v in values[:3]):
        text, old, new = values[:3]
        if (len(text) + 1) * max(1, len(new)) > MAX_RENDER_BYTES and new and (old == "" or old in text):
            raise TemplateError(f"replace could build up to {(len(text) + 1) * len(new):,} characters, over the cap")


def _guarded(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A built-in filter with the calls' checks (jinja2 calls filters directly, not through ``call``)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _check_arguments(name, args, kwargs)
        return _check(func(*args, **kwargs), f"the filter {name!r}")

    for attr in ("jinja_pass_arg",):  # jinja2 passes the environment/context to filters marked so
        if hasattr(func, attr):
            setattr(wrapper, attr, getattr(func, attr))
    wrapper.__name__ = name
    return wrapper


def compile_template(source: str, raise_exception: Callable[[str], None]) -> Any:
    """The template compiled in the bounded sandbox; a syntax error is a ``TemplateError``."""
    from jinja2 import TemplateError as JinjaError

    env = BoundedEnvironment()
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(source)
    except JinjaError as exc:
        raise TemplateError(f"does not compile: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}") from None


def render(template: Any, values: dict[str, Any], seconds: float = MAX_RENDER_S) -> str:
    """The template rendered with ``values``: streamed, its output capped, within ``seconds`` of wall time."""
    parts: list[str] = []
    size = 0
    try:
        with _deadline(seconds):
            for chunk in template.generate(**values):
                size += len(chunk)
                if size > MAX_RENDER_BYTES:
                    raise TemplateError(f"renders more than {MAX_RENDER_BYTES:,} characters (the cap)")
                parts.append(chunk)
    except _Timeout:
        raise TemplateError(f"still rendering after {seconds:g} s (the cap): a loop that does not end?") from None
    except MemoryError:
        raise TemplateError("ran out of memory while rendering (over the memory cap of its process)") from None
    except RecursionError:
        raise TemplateError("recursed too deep while rendering") from None
    except OverflowError as exc:
        raise TemplateError(f"built a number too large: {exc}") from None
    return "".join(parts)


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """SIGALRM after ``seconds`` raises ``_Timeout`` in the render (the main OS thread only: a greenlet of a Locust
    process is on it; another thread has the size caps only)."""

    def expire(signum: int, frame: Any) -> None:
        raise _Timeout()

    try:  # the interpreter itself says whether this is the main thread (gevent's patched threading would not)
        previous = signal.signal(signal.SIGALRM, expire)
    except (ValueError, AttributeError):  # not the main thread, or no SIGALRM here
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
