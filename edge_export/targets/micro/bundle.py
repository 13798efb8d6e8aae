"""The firmware bundle of ``--target micro`` (``--emit-c DIR``): C++ sources a TFLite Micro firmware builds.

For a model named ``<name>`` (a C identifier made from the .tflite stem, ``c_identifier``):

    <name>_model_data.h / .cc   the .tflite as ``alignas(16) const unsigned char <name>_model_data[]``,
                                its length, the tensor arena size, and the sha256 and report headline
    <name>_op_resolver.h        ``<name>_register_ops(tflite::MicroMutableOpResolver<N>&)``
    <name>_test_data.h / .cc    a few int8 inputs and the outputs the host TFLite Micro interpreter
                                gave for them, with the tolerance in quantization steps
    <name>_test.cc              runs every vector through ``MicroInterpreter`` and compares

Why ``alignas(16)``: TFLite Micro reads the flatbuffer in place, and an unaligned array hard-faults a
Cortex-M on wide loads (tflite-micro issue 418); edge-export's writer keeps every buffer 16-byte
aligned inside the file, which holds on the device only if the array itself starts aligned.

Why a margin on the arena: the host interpreter's recording allocator can under-count temporaries
that kernels allocate in Prepare (tflite-micro issue 2738), and optimized kernels (CMSIS-NN) ask
for scratch buffers of their own. ``arena_with_margin`` adds 10% of the measured size, at least
1 KiB, rounded up to 16 bytes (the arena's alignment).

Nothing here imports a runtime: the texts are built from numbers the micro target measured. The
test data and test program are in ``bundle_selftest.py``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from ...output.text_safety import for_c_comment  # model-supplied text (output names, paths) in // comments

__all__ = [
    "ARENA_MARGIN_FRACTION",
    "ARENA_MARGIN_MIN_BYTES",
    "BUNDLE_SUFFIXES",
    "TEST_TOLERANCE_STEPS",
    "TEST_VECTOR_COUNT",
    "arena_with_margin",
    "bundle_paths",
    "c_identifier",
    "render_model_data",
    "render_op_resolver",
    "include_guard",
    "value_rows",
]

ARENA_MARGIN_FRACTION = 0.10
ARENA_MARGIN_MIN_BYTES = 1024
TEST_VECTOR_COUNT = 3
# The reference kernels on the device compute what the host ran, bit for bit; optimized kernels
# (CMSIS-NN) too under its quantization rules. One step leaves room for a LUT or rounding built
# differently by another compiler without hiding a wrong kernel (those are off by many steps).
TEST_TOLERANCE_STEPS = 1

# The files of a bundle, in the order they are listed (each is <name> + suffix).
BUNDLE_SUFFIXES = (
    "_model_data.h",
    "_model_data.cc",
    "_op_resolver.h",
    "_test_data.h",
    "_test_data.cc",
    "_test.cc",
)

# C and C++ keywords (C23, C++20) and names the standard library reserves as macros: a stem equal
# to one is prefixed, so that ``<name>`` alone (it names nothing today) stays usable later.
_RESERVED = frozenset(
    [
        "alignas",
        "alignof",
        "and",
        "and_eq",
        "asm",
        "auto",
        "bitand",
        "bitor",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "char8_t",
        "char16_t",
        "char32_t",
        "class",
        "compl",
        "concept",
        "const",
        "consteval",
        "constexpr",
        "constinit",
        "const_cast",
        "continue",
        "co_await",
        "co_return",
        "co_yield",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "dynamic_cast",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "not_eq",
        "nullptr",
        "operator",
        "or",
        "or_eq",
        "private",
        "protected",
        "public",
        "register",
        "reinterpret_cast",
        "requires",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "static_assert",
        "static_cast",
        "struct",
        "switch",
        "template",
        "this",
        "thread_local",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "typeof",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "wchar_t",
        "while",
        "xor",
        "xor_eq",
        "errno",
        "assert",
        "offsetof",
        "NULL",
        "main",
    ]
)


def c_identifier(stem: str) -> str:
    """A C identifier from a file stem: other characters become ``_``, runs of ``_`` one ``_``, no
    leading ``_`` (reserved at global scope in C++, as is ``__`` anywhere); a stem that starts
    with a digit, is empty or is a keyword gets the prefix ``model_``."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    name = re.sub(r"_+", "_", name).strip("_")
    if not name or name[0].isdigit() or name in _RESERVED:
        name = f"model_{name}" if name else "model"
    return name


def arena_with_margin(measured: int) -> int:
    """The arena size the firmware should reserve for ``measured`` bytes (see the module docstring)."""
    margin = max(int(np.ceil(measured * ARENA_MARGIN_FRACTION)), ARENA_MARGIN_MIN_BYTES)
    return -(-(measured + margin) // 16) * 16


def bundle_paths(folder: Path, name: str) -> list[Path]:
    return [folder / f"{name}{suffix}" for suffix in BUNDLE_SUFFIXES]


def include_guard(filename: str) -> str:
    return "EDGE_EXPORT_" + re.sub(r"[^A-Za-z0-9]", "_", filename).upper() + "_"


def _byte_rows(data: bytes, per_row: int = 12) -> str:
    rows = []
    for start in range(0, len(data), per_row):
        rows.append(
            "  " + ", ".join(f"0x{b:02x}" for b in data[start : start + per_row]) + ","
        )
    return "\n".join(rows)


def value_rows(values: np.ndarray, per_row: int = 16) -> str:
    flat = values.reshape(-1)
    if flat.dtype.kind == "f":
        text = [f"{float(v)!r}f" for v in flat]
    elif flat.dtype.kind == "b":
        text = ["true" if v else "false" for v in flat]
    else:
        text = [str(int(v)) for v in flat]
    if not text:
        return ""
    return "\n".join(
        "  " + ", ".join(text[i : i + per_row]) + ","
        for i in range(0, len(text), per_row)
    )


def render_model_data(
    name: str,
    model_bytes: bytes,
    *,
    source: str,
    headline: str,
    arena_measured: int,
    arena_size: int,
    tool_version: str,
) -> tuple[str, str]:
    """(header, source) of the model array. The header declares the array with the same
    ``alignas(16)`` as its definition (C++ requires equivalent alignment on every declaration that
    has one) and the arena constants; the source includes the header first, which gives the
    ``const`` array external linkage."""
    sha = hashlib.sha256(model_bytes).hexdigest()
    header_name = f"{name}_model_data.h"
    guard = include_guard(header_name)
    margin = arena_size - arena_measured
    about = [
        f"// {for_c_comment(source)} as a C array, written by edge-export {tool_version}.",
        f"// {len(model_bytes)} bytes, sha256 {sha}",
        f"// Report: {for_c_comment(headline)}",
    ]
    header = "\n".join(
        [
            *about,
            "//",
            "// The array is 16-byte aligned: TFLite Micro reads the model in place and a Cortex-M",
            "// faults on unaligned wide loads (tflite-micro issue 418). Keep alignas(16) if you copy it.",
            "//",
            f"// {name}_arena_size: the tensor arena to reserve. TFLite Micro's host interpreter needed",
            f"// {arena_measured} bytes (edge-export's measurement); {margin} bytes are added (10%, at least",
            f"// {ARENA_MARGIN_MIN_BYTES}, rounded up to 16) because its recording allocator can under-count",
            "// temporaries made in Prepare (tflite-micro issue 2738) and optimized kernels (CMSIS-NN)",
            "// may ask for scratch buffers. On a 32-bit core TFLite Micro's own structures are smaller.",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            f"alignas(16) extern const unsigned char {name}_model_data[];",
            f"extern const unsigned int {name}_model_data_len;",
            "",
            f"constexpr unsigned int {name}_arena_measured_size = {arena_measured};",
            f"constexpr unsigned int {name}_arena_size = {arena_size};",
            "",
            f"#endif  // {guard}",
            "",
        ]
    )
    source_text = "\n".join(
        [
            *about,
            f'#include "{header_name}"',
            "",
            f"alignas(16) const unsigned char {name}_model_data[] = {{",
            _byte_rows(model_bytes),
            "};",
            f"const unsigned int {name}_model_data_len = {len(model_bytes)};",
            "",
        ]
    )
    return header, source_text


def render_op_resolver(name: str, resolver_lines: str) -> str:
    """The op resolver (``micro.emit_op_resolver``'s lines for the function ``<name>_register_ops``)
    as a header with include guards."""
    guard = include_guard(f"{name}_op_resolver.h")
    return f"#ifndef {guard}\n#define {guard}\n\n{resolver_lines}\n#endif  // {guard}\n"
