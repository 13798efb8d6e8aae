"""Per-operator support rules of a target, registered one small function per operator (or family).

A target that predicts which operators an accelerator runs (the Edge TPU today) keeps an
``OperatorRules`` registry and decorates each rule with the opcodes it checks::

    EDGETPU_RULES = OperatorRules("Edge TPU")

    @EDGETPU_RULES.rule("SOFTMAX")
    def _softmax_is_1d(op, model, constants):
        return None if ... else "softmax input [1, 4, 8] is not 1-D"

A rule returns None when the operator meets it, else the reason it does not map. Rules of one
opcode run in registration order and the first reason wins, so a rule may assume the earlier ones
passed.

A checker that lists every broken rule rather than the first (CMSIS-NN's kernel rules) uses
``findings``: every rule of the opcode runs, and each returns the findings it makes (a tuple, empty
when the operator meets it). ``rule(EVERY_OPERATOR)`` registers a rule that runs for every opcode,
in its place in the registration order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel, OperatorInfo

__all__ = ["EVERY_OPERATOR", "OperatorRule", "OperatorRules"]

EVERY_OPERATOR = "*"

# (operator, model, integer values of the constant inputs it needs) -> None or why it does not map
OperatorRule = Callable[["OperatorInfo", "FlatbufferModel", Mapping[int, list[int]]], "str | None"]


class OperatorRules:
    def __init__(self, target: str) -> None:
        self.target = target
        self._rules: list[tuple[frozenset[str], Callable[..., Any]]] = []  # in registration order

    def rule(self, *opcodes: str) -> Callable[[OperatorRule], OperatorRule]:
        """Register the decorated function as a rule of each of ``opcodes``."""
        if not opcodes:
            raise ValueError("a rule needs at least one opcode")

        def register(fn: OperatorRule) -> OperatorRule:
            self._rules.append((frozenset(opcodes), fn))
            return fn

        return register

    def rules_for(self, opcode: str) -> tuple[OperatorRule, ...]:
        return tuple(fn for opcodes, fn in self._rules if opcode in opcodes or EVERY_OPERATOR in opcodes)

    @property
    def opcodes(self) -> frozenset[str]:
        """The opcodes that have rules of their own."""
        return frozenset(o for opcodes, _ in self._rules for o in opcodes if o != EVERY_OPERATOR)

    def first_violation(self, op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> str | None:
        for rule in self.rules_for(op.opcode):
            reason = rule(op, model, constants)
            if reason:
                return reason
        return None

    def findings(self, op: OperatorInfo, model: FlatbufferModel, constants: Mapping[int, list[int]]) -> list[Any]:
        """What every rule of ``op``'s opcode finds, in registration order (for rules that return a
        tuple of findings)."""
        found: list[Any] = []
        for rule in self.rules_for(op.opcode):
            found.extend(rule(op, model, constants))
        return found
