"""The firmware bundle's self-test (``<name>_test_data.h / .cc`` and ``<name>_test.cc``): a few inputs
as the model takes them and the outputs the host TFLite Micro interpreter gave for them, with the
tolerance in quantization steps, and the C++ program that runs every vector through
``MicroInterpreter`` and compares. Nothing here imports a runtime."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...output.text_safety import for_c_comment  # model-supplied text (output names, paths) in // comments
from .bundle import TEST_TOLERANCE_STEPS, include_guard as _guard, value_rows as _value_rows

__all__ = ["TestVectors", "render_test_data", "render_test_main"]

_C_TYPES = {
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "float32": "float",
    "bool": "bool",
}


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
