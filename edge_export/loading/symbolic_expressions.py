"""A small parser for the symbolic shape expressions of an ExportedProgram archive, in place of sympify.

torch writes each symbolic size as ``srepr`` text (``Symbol('s77', positive=True, integer=True)``,
``Mul(Integer(2), Symbol('s0', ...))``; older versions wrote ``2*s0``) and reads it back with
``sympy.sympify``, which evaluates Python: ``__import__('os').system(...)`` runs, and so does
``10**10**10``, which never finishes. This grammar accepts integers, symbols, ``+ - * // %``, ``min``
and ``max`` and a small set of sympy constructors, with bounded exponents, length and depth; nothing
else parses. ``parse_expression`` checks a string; ``build_sympy`` turns the checked tree into sympy
objects without evaluating any text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["ExpressionError", "Node", "parse_expression", "build_sympy", "MAX_EXPONENT", "MAX_LENGTH"]

MAX_LENGTH = 4096  # characters of one expression
MAX_DEPTH = 40  # nesting of calls and parentheses
MAX_EXPONENT = 64  # a shape is never a larger power; 10**10**10 would never finish
MAX_INTEGER_BITS = 64

# Calls allowed, with their arity (None: two or more, variadic).
_CALLS: dict[str, int | None] = {
    "Symbol": 1, "Integer": 1, "Add": None, "Mul": None, "Pow": 2, "Min": None, "Max": None,
    "FloorDiv": 2, "Mod": 2, "PythonMod": 2, "CleanDiv": 2, "CeilDiv": 2,
    "CeilToInt": 1, "FloorToInt": 1, "Neg": 1,
}
_INFIX_CALLS = {"min": "Min", "max": "Max"}
_ASSUMPTIONS = {"positive", "integer", "nonnegative", "negative", "nonpositive", "real", "finite", "nonzero", "zero"}
_SYMBOL_NAME = re.compile(r"[a-z]{1,8}[0-9]{1,9}")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|('[^'\\]{0,64}')|(//|\*\*|[-+*%(),=]))")


class ExpressionError(ValueError):
    """The text is not an expression of the allowed grammar (the message says where)."""


@dataclass(frozen=True)
class Node:
    op: str  # "int", "symbol", or a call name from _CALLS
    value: Any = None  # the int, or the symbol's name
    args: tuple["Node", ...] = ()
    assumptions: tuple[tuple[str, bool], ...] = ()


def _tokens(text: str) -> list[str]:
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"longer than {MAX_LENGTH} characters")
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ExpressionError(f"unexpected text at {pos}: {text[pos:pos + 12]!r}")
        tokens.append(next(g for g in match.groups() if g is not None))
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.pos, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise ExpressionError(f"expected {expected or 'more'} at token {self.pos}, found {token!r}")
        self.pos += 1
        return token

    def nested(self, parse: Callable[[], Node]) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"nested deeper than {MAX_DEPTH}")
        try:
            return parse()
        finally:
            self.depth -= 1

    def sum(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.term()
            node = Node("Add", args=(node, right if op == "+" else Node("Neg", args=(right,))))
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek() in ("*", "//", "%"):
            op = {"*": "Mul", "//": "FloorDiv", "%": "PythonMod"}[self.take()]
            node = Node(op, args=(node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.peek() == "-":
            self.take()
            return Node("Neg", args=(self.nested(self.unary),))
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        return _power(base, self.atom())

    def atom(self) -> Node:
        token = self.take()
        if token.isdigit():
            return _integer(token)
        if token == "(":
            node = self.nested(self.sum)
            self.take(")")
            return node
        name = _INFIX_CALLS.get(token, token)
        if name in _CALLS and self.peek() == "(":
            return self.nested(lambda: self.call(name))
        if _SYMBOL_NAME.fullmatch(token):
            return Node("symbol", token)
        raise ExpressionError(f"{token!r} is not an allowed name")

    def call(self, name: str) -> Node:
        self.take("(")
        if name == "Symbol":
            return self.symbol()
        args = [self.sum()]
        while self.peek() == ",":
            self.take()
            args.append(self.sum())
        self.take(")")
        arity = _CALLS[name]
        if (arity is None and len(args) < 2) or (arity is not None and len(args) != arity):
            raise ExpressionError(f"{name} takes {arity or 'two or more'} arguments, not {len(args)}")
        if name == "Integer":
            return args[0] if args[0].op == "int" else _fail("Integer() of a non-integer")
        if name == "Pow":
            return _power(args[0], args[1])
        return Node(name, args=tuple(args))

    def symbol(self) -> Node:
        quoted = self.take()
        name = quoted[1:-1] if quoted.startswith("'") else ""
        if not _SYMBOL_NAME.fullmatch(name):
            raise ExpressionError(f"{quoted!r} is not a symbol name")
        assumptions = []
        while self.peek() == ",":
            self.take()
            key = self.take()
            self.take("=")
            value = self.take()
            if key not in _ASSUMPTIONS or value not in ("True", "False"):
                raise ExpressionError(f"Symbol assumption {key}={value} is not allowed")
            assumptions.append((key, value == "True"))
        self.take(")")
        return Node("symbol", name, assumptions=tuple(assumptions))


def _fail(message: str) -> Node:
    raise ExpressionError(message)


def _integer(token: str) -> Node:
    value = int(token[:40])  # at most 40 digits are read: a longer literal is refused below anyway
    if len(token) > 40 or value.bit_length() > MAX_INTEGER_BITS:
        raise ExpressionError(f"integer {token[:20]}... is larger than {MAX_INTEGER_BITS} bits")
    return Node("int", value)


def _power(base: Node, exponent: Node) -> Node:
    if exponent.op != "int" or exponent.value > MAX_EXPONENT:
        raise ExpressionError(f"an exponent must be an integer of at most {MAX_EXPONENT}")
    if any(n.op == "Pow" for n in _walk(base)):
        raise ExpressionError("a power of a power is not allowed")
    return Node("Pow", args=(base, exponent))


def _walk(node: Node):
    yield node
    for arg in node.args:
        yield from _walk(arg)


def parse_expression(text: str) -> Node:
    """The checked tree of ``text``; ExpressionError when it is outside the grammar."""
    if not isinstance(text, str):
        raise ExpressionError("not a string")
    parser = _Parser(_tokens(text))
    node = parser.sum()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} after the expression")
    return node


def build_sympy(node: Node, functions: Mapping[str, Any] | None = None) -> Any:
    """sympy objects for a checked tree; ``functions`` supplies torch's sympy functions by name
    (FloorDiv, PythonMod, ...), as torch's deserializer passes them to sympify."""
    import sympy

    table = {"Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow, "Min": sympy.Min, "Max": sympy.Max}
    table.update({k: v for k, v in (functions or {}).items() if k in _CALLS and k not in table})
    if node.op == "int":
        return sympy.Integer(node.value)
    if node.op == "symbol":
        return sympy.Symbol(node.value, **dict(node.assumptions))
    args = [build_sympy(a, functions) for a in node.args]
    if node.op == "Neg":
        return -args[0]
    if node.op not in table:
        from torch.utils._sympy import functions as torch_functions

        table[node.op] = getattr(torch_functions, node.op)
    return table[node.op](*args)
