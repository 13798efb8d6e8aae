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

Nothing here imports a runtime: the texts are built from numbers the micro target measured.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...output.text_safety import for_c_comment  # model-supplied text (output names, paths) in // comments

__all__ = [
    "ARENA_MARGIN_FRACTION",
    "ARENA_MARGIN_MIN_BYTES",
    "BUNDLE_SUFFIXES",
    "TEST_TOLERANCE_STEPS",
    "TEST_VECTOR_COUNT",
    "TestVectors",
    "arena_with_margin",
    "bundle_paths",
    "c_identifier",
    "render_model_data",
    "render_op_resolver",
    "render_test_data",
    "render_test_main",
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

_C_TYPES = {
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "float32": "float",
    "bool": "bool",
}


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


def _guard(filename: str) -> str:
    return "EDGE_EXPORT_" + re.sub(r"[^A-Za-z0-9]", "_", filename).upper() + "_"


def _byte_rows(data: bytes, per_row: int = 12) -> str:
    rows = []
    for start in range(0, len(data), per_row):
        rows.append(
            "  " + ", ".join(f"0x{b:02x}" for b in data[start : start + per_row]) + ","
        )
    return "\n".join(rows)


def _value_rows(values: np.ndarray, per_row: int = 16) -> str:
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
    guard = _guard(header_name)
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
    guard = _guard(f"{name}_op_resolver.h")
    return f"#ifndef {guard}\n#define {guard}\n\n{resolver_lines}\n#endif  // {guard}\n"


@dataclass(frozen=True)
class TestVectors:
    """Inputs as the model takes them (dtype, layout, quantization) and the outputs the host TFLite
    Micro interpreter returned for them: one array per model input/output, vectors on axis 0."""

    __test__ = False  # not a pytest class

    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    tolerance_steps: int = TEST_TOLERANCE_STEPS

    @property
    def count(self) -> int:
        return int(self.inputs[0].shape[0]) if self.inputs else 0


def _c_type(array: np.ndarray, what: str) -> str:
    try:
        return _C_TYPES[array.dtype.name]
    except KeyError:
        from ...errors import TargetError

        raise TargetError(
            f"The C bundle cannot hold the model's {what} of type {array.dtype.name}.",
            "Export with int8 inputs and outputs (--target micro implies them), or pass --no-emit-c.",
        ) from None


def render_test_data(
    name: str, vectors: TestVectors, *, headline: str
) -> tuple[str, str]:
    """(header, source) of the test vectors: ``<name>_test_input_<i>`` and
    ``<name>_test_expected_output_<j>``, each ``count * size`` values, vector after vector."""
    header_name = f"{name}_test_data.h"
    guard = _guard(header_name)
    declarations, definitions = [], []
    for kind, arrays in (
        ("input", vectors.inputs),
        ("expected_output", vectors.outputs),
    ):
        for i, array in enumerate(arrays):
            ctype = _c_type(array, kind.replace("_", " "))
            size = int(np.prod(array.shape[1:], dtype=np.int64))
            var = f"{name}_test_{kind}_{i}"
            shape = "x".join(str(d) for d in array.shape[1:])
            declarations += [
                f"// {kind.replace('_', ' ')} {i}: {array.dtype.name} [{shape}] per vector",
                f"constexpr unsigned int {var}_size = {size};",
                f"alignas(16) extern const {ctype} {var}[{vectors.count} * {size}];",
            ]
            definitions += [
                f"alignas(16) const {ctype} {var}[{vectors.count} * {size}] = {{",
                _value_rows(array),
                "};",
                "",
            ]
    header = "\n".join(
        [
            f"// Test vectors of {name}, written by edge-export: inputs in the model's own dtype, layout",
            "// and quantization, and the outputs TFLite Micro's host interpreter (reference kernels)",
            f"// returned for them. Report: {for_c_comment(headline)}",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            "#include <cstdint>",
            "",
            f"constexpr unsigned int {name}_test_vector_count = {vectors.count};",
            f"constexpr unsigned int {name}_test_input_count = {len(vectors.inputs)};",
            f"constexpr unsigned int {name}_test_output_count = {len(vectors.outputs)};",
            "// Largest difference allowed per output value, in quantization steps (the integer units",
            "// of the output): reference kernels reproduce the host bit for bit.",
            f"constexpr int {name}_test_tolerance = {vectors.tolerance_steps};",
            "",
            *declarations,
            "",
            f"#endif  // {guard}",
            "",
        ]
    )
    source = "\n".join(
        [
            f"// Test vectors of {name}, written by edge-export.",
            f'#include "{header_name}"',
            "",
            *definitions,
        ]
    )
    return header, source


def render_test_main(
    name: str,
    op_count: int,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
) -> str:
    """``<name>_test.cc``: ``int <name>_run_test_vectors()`` (0 when every vector matches) and a
    ``main`` calling it, left out when ``EDGE_EXPORT_NO_TEST_MAIN`` is defined (firmware with its
    own main calls the function)."""
    lines = _test_main_head(name) + _test_main_setup(name, op_count)
    for i, array in enumerate(inputs):
        lines += _test_input_copy(name, i, array)
    lines += [
        "    if (interpreter.Invoke() != kTfLiteOk) {",
        '      MicroPrintf("Invoke failed on vector %d", static_cast<int>(v));',
        "      return 1;",
        "    }",
    ]
    for j, array in enumerate(outputs):
        lines += _test_output_check(name, j, array)
    return "\n".join(lines + _test_main_tail(name))


def _test_main_head(name: str) -> list[str]:
    """The test program's comment, includes and tensor arena."""
    return [
        f"// Runs the test vectors of {name} through TFLite Micro and compares the outputs with the",
        "// host's within the tolerance. Written by edge-export. Build it with TFLite Micro, e.g. in",
        "// the tflite-micro tree (or any firmware project that compiles TFLite Micro):",
        f"//   {name}_test.cc {name}_model_data.cc {name}_test_data.cc + libtensorflow-microlite.a",
        "// Exit status 0: every vector matched. Define EDGE_EXPORT_NO_TEST_MAIN to call",
        f"// {name}_run_test_vectors() from your own main.",
        "#include <cstdint>",
        "#include <cstdlib>",
        "#include <cstring>",
        "",
        '#include "tensorflow/lite/micro/micro_interpreter.h"',
        '#include "tensorflow/lite/micro/micro_log.h"',
        '#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"',
        '#include "tensorflow/lite/schema/schema_generated.h"',
        "",
        "// TFLite Micro dropped tensorflow/lite/version.h, where this lived; the schema is at version 3.",
        "#ifndef TFLITE_SCHEMA_VERSION",
        "#define TFLITE_SCHEMA_VERSION 3",
        "#endif",
        "",
        f'#include "{name}_model_data.h"',
        f'#include "{name}_op_resolver.h"',
        f'#include "{name}_test_data.h"',
        "",
        "namespace {",
        f"alignas(16) uint8_t {name}_tensor_arena[{name}_arena_size];",
        "}  // namespace",
        "",
    ]


def _test_main_setup(name: str, op_count: int) -> list[str]:
    """``<name>_run_test_vectors()`` up to the loop over the vectors: model, resolver, interpreter."""
    return [
        f"int {name}_run_test_vectors() {{",
        f"  const tflite::Model* model = tflite::GetModel({name}_model_data);",
        "  if (model->version() != TFLITE_SCHEMA_VERSION) {",
        '    MicroPrintf("schema version %d, expected %d", static_cast<int>(model->version()), TFLITE_SCHEMA_VERSION);',
        "    return 1;",
        "  }",
        f"  static tflite::MicroMutableOpResolver<{op_count}> resolver;",
        f"  if ({name}_register_ops(resolver) != kTfLiteOk) {{",
        '    MicroPrintf("registering the operators failed");',
        "    return 1;",
        "  }",
        f"  tflite::MicroInterpreter interpreter(model, resolver, {name}_tensor_arena, {name}_arena_size);",
        "  if (interpreter.AllocateTensors() != kTfLiteOk) {",
        f'    MicroPrintf("AllocateTensors failed: is {name}_arena_size too small?");',
        "    return 1;",
        "  }",
        "  int mismatches = 0;",
        f"  for (unsigned int v = 0; v < {name}_test_vector_count; ++v) {{",
    ]


def _test_input_copy(name: str, i: int, array: np.ndarray) -> list[str]:
    """Copy vector ``v`` of input ``i`` into the interpreter, after checking its size."""
    ctype, var = _c_type(array, "input"), f"{name}_test_input_{i}"
    return [
        f"    TfLiteTensor* input_{i} = interpreter.input({i});",
        f"    if (input_{i}->bytes != {var}_size * sizeof({ctype})) {{",
        f'      MicroPrintf("input {i} holds %d bytes, the test data %d", static_cast<int>(input_{i}->bytes), static_cast<int>({var}_size * sizeof({ctype})));',
        "      return 1;",
        "    }",
        f"    std::memcpy(input_{i}->data.raw, &{var}[v * {var}_size], {var}_size * sizeof({ctype}));",
    ]


def _test_output_check(name: str, j: int, array: np.ndarray) -> list[str]:
    """Compare output ``j`` of vector ``v`` with the host's, within the tolerance."""
    ctype, var = _c_type(array, "output"), f"{name}_test_expected_output_{j}"
    return [
        "    {",
        f"      const TfLiteTensor* output = interpreter.output({j});",
        f"      if (output->bytes != {var}_size * sizeof({ctype})) {{",
        f'        MicroPrintf("output {j} holds %d bytes, the test data %d", static_cast<int>(output->bytes), static_cast<int>({var}_size * sizeof({ctype})));',
        "        return 1;",
        "      }",
        f"      const {ctype}* got = reinterpret_cast<const {ctype}*>(output->data.raw);",
        f"      const {ctype}* expected = &{var}[v * {var}_size];",
        f"      for (unsigned int k = 0; k < {var}_size; ++k) {{",
        "        const double difference = static_cast<double>(got[k]) - static_cast<double>(expected[k]);",
        f"        if (difference > {name}_test_tolerance || difference < -{name}_test_tolerance) {{",
        f'          MicroPrintf("vector %d output {j} value %d: got %d, expected %d", static_cast<int>(v), static_cast<int>(k), static_cast<int>(got[k]), static_cast<int>(expected[k]));',
        "          ++mismatches;",
        "          break;",
        "        }",
        "      }",
        "    }",
    ]


def _test_main_tail(name: str) -> list[str]:
    """The end of the loop and of the function, and the optional ``main``."""
    return [
        "  }",
        "  if (mismatches != 0) {",
        '    MicroPrintf("%d output(s) differ from the host run", mismatches);',
        "    return 1;",
        "  }",
        f'  MicroPrintf("{name}: %d test vector(s) match", static_cast<int>({name}_test_vector_count));',
        "  return 0;",
        "}",
        "",
        "#ifndef EDGE_EXPORT_NO_TEST_MAIN",
        f"int main() {{ return {name}_run_test_vectors(); }}",
        "#endif",
        "",
    ]
