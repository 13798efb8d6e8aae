"""Reading what a child process sends back: the one allow-list every child's result goes through.

A child (the confined run of an untrusted model in ``sandbox.py``, or a stage run apart in
``isolation.py``) may have run hostile code, so its bytes are data, never instructions: the parent
unpickles them with ``RestrictedUnpickler``, which builds edge_export's dataclasses, enums and
errors, Python's exceptions, paths, numpy arrays and plain containers, and refuses every other name.
"""

from __future__ import annotations

import builtins
import io
import pickle
from typing import Any

from ..errors import EdgeExportError

__all__ = ["RestrictedUnpickler", "loads_child_result", "transportable_error"]


class RestrictedUnpickler(pickle.Unpickler):
    """Builds only what a run's result is made of; a child that ran hostile code cannot make the
    parent call anything else. Exceptions: edge_export's errors and Python's built-in ones (a
    child sends any other as a RuntimeError with its text: ``transportable_error``)."""

    _PLAIN = {
        ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"), ("builtins", "slice"),
        ("builtins", "bytearray"), ("collections", "OrderedDict"), ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"), ("pathlib", "Path"), ("numpy", "dtype"), ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        # a contiguous array under pickle protocol 5: its bytes, dtype, shape and order, nothing else
        ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._PLAIN:
            return super().find_class(module, name)
        if module.startswith("numpy") and name.endswith("DType") and "." not in name:
            return super().find_class(module, name)  # numpy 2's dtype classes (Float32DType, ...)
        if module == "builtins" and isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException):
            return getattr(builtins, name)
        if module == "edge_export" or module.startswith("edge_export."):
            value = super().find_class(module, name)
            if _is_result_type(value):
                return value
        if (module == "ai_edge_litert.schema_py_generated" or (module, name) == ("flatbuffers.table", "Table")) and name.isidentifier():
            # the flatbuffer's generated classes (object API and accessors over bytes): plain
            # attribute holders, built without running any of their code
            value = super().find_class(module, name)
            if isinstance(value, type) and not {"__setstate__", "__reduce__", "__reduce_ex__", "__new__"} & set(vars(value)):
                return value
        raise pickle.UnpicklingError(f"the child's result names {module}.{name}, which a result never holds")


def _is_result_type(value: Any) -> bool:
    import dataclasses
    import enum

    return isinstance(value, type) and (
        dataclasses.is_dataclass(value) or issubclass(value, (enum.Enum, EdgeExportError))
    )


def loads_child_result(data: bytes) -> Any:
    """The child's pickled result, through the allow-list; anything it refuses is a RuntimeError."""
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # a result the allow-list refuses: the child's output cannot be trusted
        raise RuntimeError(f"a child process returned a result that cannot be read safely ({exc})") from None


def transportable_error(exc: BaseException) -> BaseException:
    """What a child sends for ``exc``: the error itself when the parent's allow-list builds its
    class and it pickles; else a RuntimeError naming its class and text."""
    cls = type(exc)
    if cls.__module__ == "builtins" or isinstance(exc, EdgeExportError):
        try:
            pickle.dumps(exc)
            return exc
        except Exception:  # holds something that does not pickle: its text goes instead
            pass
    return RuntimeError(f"{cls.__module__}.{cls.__qualname__}: {exc}"[:2000])
