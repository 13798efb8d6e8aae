"""Structural verification: the checks of flatbuffers' C++ Verifier, on the TFLite schema.

Neither the `flatbuffers` Python package nor ai-edge-litert exposes the C++ flatbuffers Verifier,
and the native interpreter reads the buffer without verifying it (a bad offset is a segfault).
So we verify in Python with the same rules as flatbuffers' C++ Verifier: every table, vtable,
field, string and vector must lie inside the buffer, properly aligned. The walk over the tables is
the schema walker's (``schema_walk``), by the layout read once from ai-edge-litert's generated
schema module, so the check covers every table of the schema (all builtin options included).
"""

from __future__ import annotations

from typing import Any

from ..errors import FlatbufferError
from .malformed import malformed
from .schema_layout import FieldSpec
from .schema_walk import SchemaWalker

__all__ = ["StructureVerifier", "verify_structure"]

_MAX_DEPTH = 64
_MAX_TABLES = 1_000_000


def verify_structure(data: bytes) -> None:
    """Raise FlatbufferError unless every offset, table, vector and string of ``data`` lies inside it."""
    StructureVerifier(data).verify_model()


class StructureVerifier(SchemaWalker):
    """The checks of flatbuffers' C++ Verifier, on the TFLite schema. The state the walk carries is
    a table's depth (nesting and the number of tables are bounded: a cycle of offsets ends)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.tables = 0

    def fail(self, what: str) -> FlatbufferError:
        return malformed(what)

    def check_range(self, pos: int, length: int, align: int, what: str) -> None:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.fail(f"{what} lies outside the file")
        if align > 1 and pos % align:
            raise self.fail(f"{what} is misaligned")

    def verify_model(self) -> None:
        self.walk(0)

    # ---- the walker's hooks ------------------------------------------------------------------
    def table(self, pos: int, cls: str, state: Any) -> None:
        self.verify_table(pos, cls, state)

    def verify_table(self, pos: int, cls: str, depth: int) -> None:
        what = f"the {cls} table at byte {pos}"
        self.tables += 1
        if depth > _MAX_DEPTH or self.tables > _MAX_TABLES:
            raise self.fail("its tables nest too deeply or are too many")
        self.check_range(pos, 4, 4, what)
        vtable = self.vtable_of(pos)
        self.check_range(vtable, 4, 2, f"the vtable of {what}")
        vsize, tsize = self.u16(vtable), self.u16(vtable + 2)
        if vsize < 4 or vsize % 2:
            raise self.fail(f"the vtable of {what} is malformed")
        self.check_range(vtable, vsize, 2, f"the vtable of {what}")
        self.check_range(pos, tsize, 1, what)
        self.walk_fields(pos, cls, vtable, vsize, depth, what)

    def deref(self, field_pos: int, what: str) -> int:
        self.check_range(field_pos, 4, 4, what)
        off = self.u32(field_pos)
        target = field_pos + off
        if off == 0 or target >= self.size or off >= 2**31:
            raise self.fail(f"{what} points outside the file")
        return target

    def scalar(self, pos: int, size: int, what: str) -> None:
        self.check_range(pos, size, size, what)

    def string(self, pos: int, what: str, state: Any) -> None:
        self.check_range(pos, 4, 4, what)
        n = self.u32(pos)
        self.check_range(pos + 4, n + 1, 1, what)
        if self.data[pos + 4 + n] != 0:
            raise self.fail(f"{what} is not terminated")
        try:  # the runtime's Python bindings decode names as UTF-8
            self.data[pos + 4 : pos + 4 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def vector(self, pos: int, spec: FieldSpec, what: str, state: Any) -> int:
        self.check_range(pos, 4, 4, what)
        n = self.u32(pos)
        if n * spec.size >= 2**31:
            raise self.fail(f"{what} claims {n} elements")
        self.check_range(pos + 4, n * spec.size, 1, what)
        return n

    def child_state(self, state: Any, cls: str, index: int | None) -> Any:
        return state + 1
