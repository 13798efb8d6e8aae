"""The walk over a flatbuffer's tables by the schema layout, shared by the verifier and the byte
accounting: from the root ``Model`` table, each table's vtable names its present fields, and each
field is a scalar, a string, a vector of scalars, a sub-table, a vector of tables or a union (its
member named by the type field beside it), as ``schema_layout`` says.

A subclass says what each piece is worth to it: the verifier checks every offset and range before
reading (``verify.StructureVerifier``), the accounting claims the bytes for a category
(``accounting``). It also opens each table itself (``table``: check or claim the table and its
vtable, then ``walk_fields``) and says what state a field's contents inherit (a depth, a category).
"""

from __future__ import annotations

import struct
from typing import Any

from .schema_layout import FieldSpec, schema_layout

__all__ = ["SchemaWalker"]


class SchemaWalker:
    """The table walk; the hooks' defaults read without checking (for bytes already verified)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        layout = schema_layout()
        self.tables_layout, self.unions = layout.tables, layout.unions

    # ---- reading ---------------------------------------------------------------------------
    def u16(self, pos: int) -> int:
        return struct.unpack_from("<H", self.data, pos)[0]

    def u32(self, pos: int) -> int:
        return struct.unpack_from("<I", self.data, pos)[0]

    def vtable_of(self, pos: int) -> int:
        """Where the vtable of the table at ``pos`` starts (a signed offset back from the table)."""
        return pos - struct.unpack_from("<i", self.data, pos)[0]

    # ---- the hooks -------------------------------------------------------------------------
    def table(self, pos: int, cls: str, state: Any) -> None:
        """Visit the ``cls`` table at ``pos``: handle its bytes, then call ``walk_fields``."""
        raise NotImplementedError

    def deref(self, field_pos: int, what: str) -> int:
        """Where the offset stored at ``field_pos`` points."""
        return field_pos + self.u32(field_pos)

    def scalar(self, pos: int, size: int, what: str) -> None:
        """A scalar field (or a union's type byte) of ``size`` bytes at ``pos``."""

    def string(self, pos: int, what: str, state: Any) -> None:
        """The string at ``pos`` (its length word, bytes and terminator)."""

    def vector(self, pos: int, spec: FieldSpec, what: str, state: Any) -> int:
        """The vector at ``pos`` of the field ``spec`` (scalar_vector or table_vector); returns its length."""
        return self.u32(pos)

    def field_state(self, cls: str, spec: FieldSpec, state: Any) -> Any:
        """The state of what a present non-scalar field of a ``cls`` table reaches."""
        return state

    def child_state(self, state: Any, cls: str, index: int | None) -> Any:
        """The state of a sub-table ``cls`` (``index``: its position in a vector of tables)."""
        return state

    # ---- the walk --------------------------------------------------------------------------
    def walk(self, state: Any) -> None:
        """Walk every table reachable from the root ``Model`` table."""
        self.table(self.deref(0, "the root table"), "Model", state)

    def walk_fields(self, pos: int, cls: str, vtable: int, vsize: int, state: Any, what: str) -> None:
        """Follow each field of the ``cls`` table at ``pos`` that its vtable says is present."""
        for spec in self.tables_layout[cls]:
            voff = self.u16(vtable + spec.slot) if spec.slot < vsize else 0
            if voff == 0:
                continue
            fwhat = f"a field of {what}"
            if spec.kind == "scalar":
                self.scalar(pos + voff, spec.size, fwhat)
                continue
            sub = self.field_state(cls, spec, state)
            if spec.kind == "union":
                member = self._union_member(pos, vtable, vsize, spec, fwhat)
                if member is not None:  # unknown union members are skipped by readers too
                    self.table(self.deref(pos + voff, fwhat), member, self.child_state(sub, member, None))
            else:
                self._walk_reference(pos + voff, spec, sub, fwhat)

    def _walk_reference(self, field: int, spec: FieldSpec, state: Any, what: str) -> None:
        """A field holding an offset: to a string, a vector or a sub-table."""
        target = self.deref(field, what)
        if spec.kind == "string":
            self.string(target, what, state)
        elif spec.kind == "table":
            self.table(target, spec.target, self.child_state(state, spec.target, None))
        elif spec.kind == "scalar_vector":
            self.vector(target, spec, what, state)
        elif spec.kind == "table_vector":
            for i in range(self.vector(target, spec, what, state)):
                self.table(self.deref(target + 4 + 4 * i, what), spec.target, self.child_state(state, spec.target, i))

    def _union_member(self, pos: int, vtable: int, vsize: int, spec: FieldSpec, what: str) -> str | None:
        """The table a union field of the table at ``pos`` holds (None: no type, or one unknown)."""
        tvoff = self.u16(vtable + spec.type_slot) if spec.type_slot < vsize else 0
        if tvoff == 0:
            return None
        self.scalar(pos + tvoff, 1, what)
        return self.unions[spec.target].get(self.data[pos + tvoff])
