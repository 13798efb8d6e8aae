"""The program JSON of a .pt2 archive, checked against the schema of the torch in use.

torch's own reader (``_dict_to_dataclass``) skips keys it does not know and trusts the types of the
rest. Here every object must be exactly a schema dataclass (no unknown keys), every union exactly one
of its tags, every leaf its declared type; on top of the schema:

- symbolic expressions (``expr_str``) parse with ``symbolic_expressions`` (bounded; no sympify);
- names that torch.fx writes into generated source (parameters, buffers, constants, module paths)
  are dotted Python identifiers, and node and tensor names are identifiers;
- node targets are PyTorch operator names; custom objects and guard code are refused.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from pathlib import Path
from typing import Any

from .pt2_refusals import DOTTED_NAME, refusal
from .symbolic_expressions import ExpressionError, parse_expression

__all__ = ["check_program", "payload_bytes", "user_input_bytes"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
_OPERATOR = re.compile(
    r"torch\.ops\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?"
    r"|_operator\.[a-z_]{1,16}|math\.[a-z_]{1,16}|torch\.sym_[a-z_]{1,16}|torch\._sym_sqrt"
)
# Fields whose strings become attribute paths in generated code, and those that name graph values.
_DOTTED_FIELDS = {"parameter_name", "buffer_name", "tensor_constant_name", "fqn"}
_IDENTIFIER_FIELDS = {"name"}
_MAX_DEPTH = 200
# schema.ScalarType value -> bytes per element (BYTE, CHAR, SHORT, INT, LONG, HALF, FLOAT, DOUBLE, BOOL,
# BFLOAT16, UINT16, the float8s, UINT32, UINT64); complex and unknown types are refused.
_DTYPE_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 12: 1, 13: 2, 28: 2, 29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8}


class _Refused(Exception):
    def __init__(self, where: str, what: str) -> None:
        super().__init__(what)
        self.where, self.what = where, what


def check_program(path: Path, member: str, program: Any) -> None:
    """Refuse (UnsafeArchiveMember naming the member and the JSON path) what the schema or the rules
    above do not allow."""
    from torch._export.serde import schema

    try:
        _check(schema.ExportedProgram, program, "$", 0)
        if program.get("guards_code"):
            raise _Refused("$.guards_code", "holds guard code, which torch compiles into Python")
    except _Refused as exc:
        from ..output.text_safety import for_terminal

        raise refusal(path, member, f"is not a program the format allows: at {for_terminal(exc.where[:160])}, {exc.what}") from None


def _hints(cls: type) -> dict[str, Any]:
    from torch._export.serde import schema

    return typing.get_type_hints(cls, globalns=vars(schema))


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _check(tp: Any, value: Any, where: str, depth: int) -> None:  # noqa: C901 - one case per kind of type
    if depth > _MAX_DEPTH:
        raise _Refused(where, f"nests deeper than {_MAX_DEPTH}")
    tp = _strip(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return
        return _check(next(a for a in args if a is not type(None)), value, where, depth)
    if origin is list:
        if not isinstance(value, list):
            raise _Refused(where, "is not a list")
        for i, item in enumerate(value):
            _check(args[0], item, f"{where}[{i}]", depth + 1)
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise _Refused(where, "is not an object")
        for key, item in value.items():
            _check(args[1], item, f"{where}.{key}", depth + 1)
        return
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _check_dataclass(tp, value, where, depth)
    _check_leaf(tp, value, where)


def _check_dataclass(cls: type, value: Any, where: str, depth: int) -> None:
    from torch._export.serde.union import _Union

    if not isinstance(value, dict):
        raise _Refused(where, f"is not a {cls.__name__} object")
    hints = _hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(value) - fields
    if unknown:
        raise _Refused(where, f"has keys the schema does not define ({', '.join(sorted(map(str, unknown)))[:80]})")
    if issubclass(cls, _Union) and len(value) != 1:
        raise _Refused(where, f"must hold exactly one of {cls.__name__}'s kinds")
    if cls.__name__ in ("CustomObjArgument", "InputToCustomObjSpec"):
        raise _Refused(where, "is a custom object, which torch would unpickle")
    for key, item in value.items():
        _check(hints[key], item, f"{where}.{key}", depth + 1)
        if isinstance(item, str):
            _check_string(cls.__name__, key, item, f"{where}.{key}")


def _check_leaf(tp: Any, value: Any, where: str) -> None:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is str:
        ok = isinstance(value, str) and len(value) <= 1 << 20
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        ok = not isinstance(value, bool) and value in {m.value for m in tp}
    else:
        ok = False
    if not ok:
        raise _Refused(where, f"is not a {getattr(tp, '__name__', tp)}")


def _check_string(owner: str, key: str, text: str, where: str) -> None:
    if key == "expr_str":
        try:
            parse_expression(text)
        except ExpressionError as exc:
            raise _Refused(where, f"is a symbolic expression outside the allowed grammar ({exc})") from None
    elif key in _DOTTED_FIELDS and text and not DOTTED_NAME.fullmatch(text):
        raise _Refused(where, "is a name that is not a dotted Python identifier")
    elif key in _IDENTIFIER_FIELDS and owner not in ("NamedArgument", "GraphArgument") and not _IDENTIFIER.fullmatch(text):
        raise _Refused(where, "is a value name that is not a Python identifier")
    elif (owner, key) in (("Node", "target"), ("Argument", "as_operator")) and not _OPERATOR.fullmatch(text):
        raise _Refused(where, "is not a PyTorch operator name")


def _numel(sizes: Any, where: str) -> int:
    total = 1
    for i, size in enumerate(sizes if isinstance(sizes, list) else [None]):
        value = size.get("as_int") if isinstance(size, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**40:
            raise _Refused(f"{where}.sizes[{i}]", "is not a fixed size")
        total *= value
        if total >= 2**42:
            raise _Refused(where, "declares a tensor larger than 4 TiB")
    return total


def _extent(meta: dict, where: str) -> int:
    """Elements a strided tensor reaches in its storage: offset + sum((size - 1) * stride) + 1."""
    numel = _numel(meta.get("sizes"), where)
    if numel == 0:
        return 0
    strides = meta.get("strides") if isinstance(meta.get("strides"), list) else []
    offset = meta.get("storage_offset", {}).get("as_int", 0) if isinstance(meta.get("storage_offset"), dict) else 0
    sizes = [s["as_int"] for s in meta["sizes"]]
    if len(strides) != len(sizes) or not isinstance(offset, int) or not 0 <= offset < 2**40:
        raise _Refused(where, "has strides or an offset that do not match its sizes")
    reach = offset + 1
    for size, stride in zip(sizes, strides):
        step = stride.get("as_int") if isinstance(stride, dict) else None
        if not isinstance(step, int) or not 0 <= step < 2**40:
            raise _Refused(where, "has a stride that is not a fixed size")
        reach += (size - 1) * step
    return reach


def _dtype_bytes(meta: dict, where: str) -> int:
    dtype = meta.get("dtype")
    if dtype not in _DTYPE_BYTES:
        from torch._export.serde.schema import ScalarType

        names = {m.value: m.name for m in ScalarType}
        raise _Refused(where, f"has dtype {names.get(dtype, dtype)}, which a model file does not need")
    return _DTYPE_BYTES[dtype]


def payload_bytes(path: Path, member: str, fqn: str, meta: Any) -> int:
    """The bytes a stored tensor occupies, from its metadata."""
    try:
        if not isinstance(meta, dict):
            raise _Refused(fqn, "has no tensor metadata")
        return _extent(meta, fqn) * _dtype_bytes(meta, fqn)
    except _Refused as exc:
        raise refusal(path, member, f"describes tensor {exc.where}: it {exc.what}") from None


def user_input_bytes(program: dict) -> int:
    """Bytes of the user inputs the graph declares (symbolic sizes counted at their hints)."""
    graph = program["graph_module"]["graph"]
    values = graph.get("tensor_values", {})
    total = 0
    for spec in program["graph_module"]["signature"]["input_specs"]:
        arg = spec.get("user_input", {}).get("arg", {}).get("as_tensor") if isinstance(spec, dict) else None
        meta = values.get(arg.get("name")) if isinstance(arg, dict) else None
        if not isinstance(meta, dict):
            continue
        count = 1
        for size in meta.get("sizes", []):
            hint = size.get("as_int") if "as_int" in size else (size.get("as_expr", {}).get("hint") or {}).get("as_int", 1)
            count *= max(int(hint or 1), 1)
        total += count * _DTYPE_BYTES.get(meta.get("dtype"), 8)
    return total
