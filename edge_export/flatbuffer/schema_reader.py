"""The one door to ai-edge-litert's generated schema reader: the lazy root table of a flatbuffer,
the names of the schema's enums, and the few facts other modules read straight from the tables
without unpacking the model (a large model costs nothing).

The lazy reader follows offsets without checking them: ``model_table`` is for bytes the package
verified (``read_flatbuffer``) or wrote (``pack_model``), and for the converter's own output.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "dtype_names",
    "has_builtin_operator",
    "metadata_buffer",
    "model_table",
    "opcode_names",
    "options_names",
]


def model_table(data: bytes) -> Any:
    """The schema's lazy ``Model`` reader over ``data``: only the tables asked for are decoded."""
    from ai_edge_litert import schema_py_generated as schema

    return schema.Model.GetRootAs(data, 0)


def dtype_names() -> dict[int, str]:
    """``TensorType`` value -> lower-case name (``float32``, ``int8``, ...)."""
    from ai_edge_litert import schema_py_generated as schema

    return {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}


def opcode_names() -> dict[int, str]:
    """``BuiltinOperator`` value -> name (``CONV_2D``, ...)."""
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def options_names() -> dict[int, str]:
    """``BuiltinOptions`` union type value -> table name (``Conv2DOptions``, ...)."""
    from ai_edge_litert import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOptions).items() if not k.startswith("_")}


def has_builtin_operator(data: bytes, name: str) -> bool:
    """Whether the operator-code table of ``data`` lists the builtin operator ``name`` (``TRANSPOSE``)."""
    from ai_edge_litert import schema_py_generated as schema

    wanted = getattr(schema.BuiltinOperator, name)
    model = model_table(data)
    codes = (model.OperatorCodes(i) for i in range(model.OperatorCodesLength()))
    return any(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()) == wanted for c in codes)


def metadata_buffer(data: bytes, name: bytes) -> bytes | None:
    """The data of the buffer the metadata entry ``name`` points at (None: no such entry, or an
    empty buffer)."""
    root = model_table(data)
    for i in range(root.MetadataLength()):
        entry = root.Metadata(i)
        if entry.Name() == name:
            buffer = root.Buffers(entry.Buffer())
            return bytes(buffer.DataAsNumpy()) if buffer.DataLength() else None
    return None
