"""Which field of which schema table is a scalar, a string, a vector, a sub-table or a union, and
where its vtable slot is: the layout the schema walker (``schema_walk``) follows, so the verifier
and the byte accounting cover every table of the schema (all builtin options included) without a
hand-written copy of it.

The layout is derived once from ai-edge-litert's generated schema module (its readers name each
field's slot and kind) and shipped as ``schema_layout.json`` beside this module.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InternalError

__all__ = ["FieldSpec", "SchemaLayout", "main", "schema_layout", "write_schema_layout"]

_SCALAR_SIZES = {
    "Bool": 1, "Int8": 1, "Uint8": 1, "Int16": 2, "Uint16": 2, "Int32": 4, "Uint32": 4,
    "Int64": 8, "Uint64": 8, "Float32": 4, "Float64": 8,
}


@dataclass(frozen=True)
class FieldSpec:
    slot: int  # vtable byte offset (4 + 2 * field id)
    kind: str  # scalar | string | table | table_vector | scalar_vector | union
    size: int = 0  # scalar or vector element size
    target: str | None = None  # table class name, or union creator name
    type_slot: int | None = None  # a union's type field


@dataclass(frozen=True)
class SchemaLayout:
    tables: dict[str, tuple[FieldSpec, ...]]  # table name -> its fields
    unions: dict[str, dict[int, str]]  # union creator name -> {type value: table name}


# The layout of the pinned ai-edge-litert schema (constraints.txt), shipped with the package:
# deriving it parses the generated module's source, ~0.6 s that every export would pay.
# Regenerate after changing the pin: `python -m edge_export.flatbuffer --write-layout`
# (tests/flatbuffer/test_flatbuffer_schema_layout.py checks the shipped file against the installed schema).
_SHIPPED_LAYOUT = Path(__file__).with_name("schema_layout.json")


def _schema_source_digest() -> str:
    """SHA-256 of the installed generated schema module's source: which schema a layout is for."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("ai_edge_litert.schema_py_generated")
    if spec is None or not spec.origin:
        raise InternalError("ai-edge-litert's generated schema module (schema_py_generated) is not installed.")
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()


def _layout_to_json(layout: SchemaLayout, schema_digest: str) -> str:
    """Deterministic JSON, one table or union a line (readable diffs when the pin moves)."""

    def section(items: dict) -> str:
        return ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(items.items()))

    tables = {k: [vars(f) for f in v] for k, v in layout.tables.items()}
    unions = {k: {str(t): n for t, n in sorted(v.items())} for k, v in layout.unions.items()}
    return (
        f'{{\n"schema_sha256": {json.dumps(schema_digest)},\n'
        f'"tables": {{\n{section(tables)}\n}},\n"unions": {{\n{section(unions)}\n}}\n}}\n'
    )


def _layout_from_json(text: str) -> tuple[SchemaLayout, str]:
    raw = json.loads(text)
    layout = SchemaLayout(
        tables={k: tuple(FieldSpec(**f) for f in v) for k, v in raw["tables"].items()},
        unions={k: {int(t): n for t, n in v.items()} for k, v in raw["unions"].items()},
    )
    return layout, raw["schema_sha256"]


@functools.lru_cache(maxsize=1)
def schema_layout() -> SchemaLayout:
    """The shipped layout when it was written for the installed schema; with another
    ai-edge-litert's schema (the pin admits a range), the layout derived from it, once per process."""
    try:
        layout, digest = _layout_from_json(_SHIPPED_LAYOUT.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InternalError(f"The flatbuffer verifier's schema layout ({_SHIPPED_LAYOUT.name}) is missing or damaged: {exc}.") from exc
    if digest == _schema_source_digest():
        return layout
    return _derive_schema_layout()


def write_schema_layout(path: Path = _SHIPPED_LAYOUT) -> Path:
    """Write the layout derived from the installed schema (the data file shipped in the package)."""
    path.write_text(_layout_to_json(_derive_schema_layout(), _schema_source_digest()), encoding="utf-8")
    return path


def _derive_schema_layout() -> SchemaLayout:
    """Map each table of the generated schema to its fields, by reading the generated code."""
    import ast
    import inspect

    from ai_edge_litert import schema_py_generated as schema

    tree = ast.parse(inspect.getsource(schema))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    creators = {
        node.name: _union_members(node, schema)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.endswith("Creator")
    }
    layout: dict[str, tuple[FieldSpec, ...]] = {}
    for name, cls in classes.items():
        methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        if "Init" in methods and f"{name}T" in classes:
            layout[name] = _table_fields(name, methods, classes[f"{name}T"])
    # If a future generated schema changed shape, fail loudly rather than verify nothing.
    model_fields = {f.target for f in layout.get("Model", ()) if f.kind == "table_vector"}
    if not {"SubGraph", "Buffer", "OperatorCode"} <= model_fields or "Conv2DOptions" not in layout:
        raise InternalError("The flatbuffer verifier could not read ai-edge-litert's generated schema.")
    return SchemaLayout(tables=layout, unions=creators)


def _union_members(creator: Any, schema: Any) -> dict[int, str]:
    """{type value: table name} of a union, from its generated ``...Creator`` function."""
    import ast

    mapping = {}
    for stmt in ast.walk(creator):
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare):
            member = stmt.test.comparators[0]
            ret = stmt.body[0]
            if isinstance(member, ast.Attribute) and isinstance(ret, ast.Return):
                enum_cls = getattr(schema, member.value.id)
                cls_name = ast.unparse(ret.value).split(".", 1)[0]
                mapping[int(getattr(enum_cls, member.attr))] = cls_name[:-1]  # FooT -> Foo
    return mapping


def _table_fields(name: str, methods: dict[str, Any], object_class: Any) -> tuple[FieldSpec, ...]:
    """The fields of table ``name``, by slot, from its reader's ``methods`` (each reads one vtable
    slot) and its object class (``{name}T``, whose ``_UnPack`` names each union's creator)."""
    import ast
    import re

    # Union fields: the object API's _UnPack names the creator and the type field.
    union_creators = {}
    unpack = next((m for m in object_class.body if isinstance(m, ast.FunctionDef) and m.name == "_UnPack"), None)
    if unpack is not None:
        for m in re.finditer(r"self\.(\w+) = (\w+Creator)\(self\.(\w+),", ast.unparse(unpack)):
            union_creators[m.group(1)[0].upper() + m.group(1)[1:]] = (m.group(2), m.group(3)[0].upper() + m.group(3)[1:])
    slots = {}
    for mname, meth in methods.items():
        src = ast.unparse(meth)
        found = re.search(r"self\._tab\.Offset\((\d+)\)", src)
        if found:
            slots[mname] = (int(found.group(1)), src)
    fields = []
    for mname, (slot, src) in slots.items():
        if not mname.endswith(("Length", "IsNone")):
            spec = _field_spec(f"{name}.{mname}", slot, src, slots, union_creators.get(mname), f"{mname}AsNumpy" in methods)
            if spec is not None:
                fields.append(spec)
    return tuple(sorted(fields, key=lambda f: f.slot))


def _field_spec(
    where: str, slot: int, src: str, slots: dict[str, tuple[int, str]], union: tuple[str, str] | None, has_numpy: bool
) -> FieldSpec | None:
    """The kind of the field a reader method's source ``src`` reads (None: not a field to follow,
    e.g. the vector accessor whose ``...AsNumpy`` sibling describes it)."""
    import re

    if where.endswith("AsNumpy"):
        flags = re.search(r"GetVectorAsNumpy\(flatbuffers\.number_types\.(\w+)Flags", src)
        return FieldSpec(slot, "scalar_vector", _SCALAR_SIZES[flags.group(1)])
    if ".Union(" in src:
        creator, type_method = union
        return FieldSpec(slot, "union", target=creator, type_slot=slots[type_method][0])
    if "Indirect(x)" in src:
        return FieldSpec(slot, "table_vector", 4, re.search(r"obj = (\w+)\(\)", src).group(1))
    if "Indirect(o + self._tab.Pos)" in src:
        return FieldSpec(slot, "table", target=re.search(r"obj = (\w+)\(\)", src).group(1))
    if "String(o + self._tab.Pos)" in src:
        return FieldSpec(slot, "string")
    if "Vector(o)" in src:
        if not has_numpy:  # a vector of strings or structs: not in this schema
            raise InternalError(f"The flatbuffer verifier does not know the kind of schema field {where}.")
        return None
    flags = re.search(r"Get\(flatbuffers\.number_types\.(\w+)Flags, o \+ self\._tab\.Pos\)", src)
    return FieldSpec(slot, "scalar", _SCALAR_SIZES[flags.group(1)]) if flags else None


def main(argv: list[str] | None = None) -> int:
    """`python -m edge_export.flatbuffer --write-layout`: regenerate the shipped layout after a pin change."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m edge_export.flatbuffer")
    parser.add_argument(
        "--write-layout", action="store_true", required=True,
        help=f"Write {_SHIPPED_LAYOUT.name} (the verifier's schema layout) from the installed ai-edge-litert.",
    )
    parser.parse_args(argv)
    print(f"wrote {write_schema_layout()}")
    return 0
