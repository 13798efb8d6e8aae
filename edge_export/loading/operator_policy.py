"""Which PyTorch operators an untrusted model may call: an allow-list decided from each operator's schema.

A model file names operators by string (a TorchScript archive's code, a ``.pt2`` graph's node targets).
Most are arithmetic, but a few reach outside the process: ``aten::from_file`` maps any file the user
can read into a tensor (which then becomes a weight of the exported ``.tflite``), ``aten::save``
writes one. Rather than list those, an operator is allowed only when

- it is in the ``aten`` or ``prim`` namespace (custom and backend namespaces load native code of
  their own), and
- every argument of every overload has a type built from values (tensors, numbers, booleans, dtypes,
  devices, layouts, strings, lists, tuples, dicts, optionals of these): no ``Storage`` (a tensor
  pointed at raw memory), ``Stream``, ``Future``, ``RRef``, ``Await`` or class object, and
- every string argument has a name from ``_STRING_ARGUMENTS``: modes, equations, messages and the
  strings of TorchScript's own string methods. A path argument (``filename``) is in no list, nor
  would a new one be: an operator that torch adds with a path argument is refused until it is
  reviewed here.
"""

from __future__ import annotations

import functools
import re

__all__ = ["operator_names", "operator_refusal", "schema_refusal"]

_NAMESPACES = ("aten", "prim")
_VALUE_TYPES = frozenset({
    "Tensor", "int", "float", "bool", "complex", "number", "Scalar", "ScalarType", "Layout", "Device",
    "MemoryFormat", "QScheme", "Generator", "str", "t", "t1", "t2", "tVal", "Any", "AnyEnumType",
    "NoneType", "SymInt", "SymFloat", "SymBool", "List", "Optional", "Tuple", "Dict", "Union",
})
# The string arguments of aten/prim operators (torch 2.13), each an enumeration, an equation, a
# message or a string value of TorchScript's string methods; never a path or a library name.
_STRING_ARGUMENTS = frozenset({
    "UPLO", "a", "activation", "algorithm", "api_name", "approximate", "assert_msg", "b", "chars", "cls", "device_type", "dict", "driver",
    "el", "equation", "fillchar", "idx", "ind", "indexing", "input", "inputs", "interpolation", "item", "key",
    "l", "message", "mode", "msg", "new", "norm", "old", "ord", "p", "pad_mode", "padding", "padding_side",
    "reduce", "rounding_mode", "s", "self", "separator", "side", "string", "substr", "t", "to_add", "type",
    "values",
})
_TYPE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def schema_refusal(schema: object) -> str | None:
    """None when every argument of this one schema (a ``torch._C.FunctionSchema``) is allowed."""
    for argument in getattr(schema, "arguments", ()):
        kind = str(argument.type)
        for word in _TYPE_WORD.findall(kind):
            if word not in _VALUE_TYPES:
                return f"its argument {argument.name} is a {kind}, not a value"
        if "str" in _TYPE_WORD.findall(kind) and argument.name not in _STRING_ARGUMENTS:
            return f"its string argument {argument.name} is not one of the reviewed kinds (a path or a name could reach outside the model)"
    return None


def operator_refusal(qualified: str) -> str | None:
    """None when the operator ``namespace::name`` may run on an untrusted model; else why not."""
    namespace, _, name = qualified.partition("::")
    if namespace not in _NAMESPACES or not name:
        return f"it is in the {namespace!r} namespace, not PyTorch's aten or prim operators"
    schemas = _schemas().get(qualified)
    if not schemas:
        return "it is not an operator this torch defines"
    for schema in schemas:
        reason = schema_refusal(schema)
        if reason:
            return reason
    return None


@functools.lru_cache(maxsize=1)
def operator_names() -> frozenset[str]:
    """Every ``namespace::name`` this torch defines."""
    return frozenset(_schemas())


@functools.lru_cache(maxsize=1)
def _schemas() -> dict[str, list]:
    import torch

    table: dict[str, list] = {}
    for schema in torch._C._jit_get_all_schemas():
        table.setdefault(schema.name, []).append(schema)
    return table
