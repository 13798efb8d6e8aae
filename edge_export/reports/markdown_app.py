"""The Markdown report's "Use it in an app" section: the signature as an app calls it, and a Kotlin
example (every name from the model in a Kotlin string literal: ``kotlin_string``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..output.serialize import to_json_value as _plain
from ..output.text_safety import code_span as _code, escape_markdown as _e, kotlin_string

if TYPE_CHECKING:
    from .model import AppSection

__all__ = ["app_section"]


# TensorBuffer's typed writers and readers (LiteRT 2.x Kotlin API) per tensor dtype.
_KOTLIN_IO = {
    "float32": ("writeFloat", "FloatArray", "readFloat"),
    "int8": ("writeInt8", "ByteArray", "readInt8"),
    "uint8": ("writeInt8", "ByteArray", "readInt8"),  # the same bytes; Kotlin has no unsigned arrays here
    "int32": ("writeInt", "IntArray", "readInt"),
    "bool": ("writeBoolean", "BooleanArray", "readBoolean"),
}


def _elements(shape) -> int:
    n = 1
    for d in _plain(shape):
        n *= max(int(d), 1)
    return n


def _signed(n: int) -> str:
    """`` + 3``, `` - 128`` or nothing (0): a zero point added in a formula."""
    return f" - {-int(n)}" if int(n) < 0 else (f" + {int(n)}" if int(n) else "")


def _kotlin_example(app: AppSection, model_file: str) -> list[str]:
    signature = app.signature_key
    out = [
        "```kotlin",
        "// LiteRT 2.x (Maven com.google.ai.edge.litert:litert), CompiledModel API; the .tflite in assets/",
        "import com.google.ai.edge.litert.Accelerator",
        "import com.google.ai.edge.litert.CompiledModel",
        "",
        f"val model = CompiledModel.create(context.assets, {kotlin_string(model_file)}, CompiledModel.Options(Accelerator.CPU))",
    ]
    if signature is not None:
        # By name: the signature's own lists are in name order, not forward()'s.
        out.append(f"val signature = {kotlin_string(signature)}")
        out.append("val inputs = mapOf(")
        out += [f"    {kotlin_string(t.name)} to model.createInputBuffer({kotlin_string(t.name)}, signature)," for t in app.inputs]
        out.append(")")
        out.append("val outputs = mapOf(")
        out += [f"    {kotlin_string(t.name)} to model.createOutputBuffer({kotlin_string(t.name)}, signature)," for t in app.outputs]
        out.append(")")
    else:
        out.append("val inputs = model.createInputBuffers()  // no signature: by position")
        out.append("val outputs = model.createOutputBuffers()")

    def buffer(kind: str, i: int, t) -> str:
        return f"{kind}.getValue({kotlin_string(t.name)})" if signature is not None else f"{kind}[{i}]"

    for i, t in enumerate(app.inputs):
        write, array, _ = _KOTLIN_IO.get(t.dtype, ("writeFloat", "FloatArray", "readFloat"))
        quant = f", q = round(x / {_plain(t.scale)}){_signed(t.zero_point)}" if t.scale is not None else ""
        out.append(f"// input {i}: {t.dtype} {list(_plain(t.shape))} {t.layout}{quant}")
        out.append(f"{buffer('inputs', i, t)}.{write}({array}({_elements(t.shape)}))  // your data")
    out.append("model.run(inputs, outputs, signature)" if signature is not None else "model.run(inputs, outputs)")
    for k, t in enumerate(app.outputs):
        _, _, read = _KOTLIN_IO.get(t.dtype, ("writeFloat", "FloatArray", "readFloat"))
        q = f"(q{_signed(-t.zero_point)})" if t.scale is not None and t.zero_point else "q"
        quant = f", x = {q} * {_plain(t.scale)}" if t.scale is not None else ""
        out.append(f"// output {k}: {t.dtype} {list(_plain(t.shape))} {t.layout}{quant}")
        out.append(f"val output{k} = {buffer('outputs', k, t)}.{read}()")
    out.append("```")
    # Names are literals of printable ASCII already; a dtype or layout read from a file is kept to
    # the same characters, so nothing can end the code block.
    return [re.sub(r"[^ -~]", "?", line) for line in out]


def app_section(app: AppSection, tflite: str) -> list[str]:
    from pathlib import PurePath

    out = ["## Use it in an app", ""]
    if app.signature_key is not None:
        out.append(
            f"Signature {_code(app.signature_key)}: look inputs and outputs up by these names (LiteRT 2.x "
            "<code>CompiledModel</code>, or the Interpreter's signature runner)."
        )
    else:
        out.append("The model has no signature: apps address its inputs and outputs by position.")
    out.append("")
    out.append("| | name | dtype | shape | layout | scale | zero point |")
    out.append("|---|---|---|---|---|---|---|")
    for side, tensors in (("input", app.inputs), ("output", app.outputs)):
        for t in tensors:
            out.append(
                f"| {side} | {_code(t.name)} | {_e(t.dtype)} | {_e('×'.join(str(d) for d in _plain(t.shape)))} | "
                # the scale in full (as the JSON has it): an app quantizes with it
                f"{_e(t.layout)} | {_e(_plain(t.scale)) if t.scale is not None else '–'} | "
                f"{_e(_plain(t.zero_point)) if t.zero_point is not None else '–'} |"
            )
    out.append("")
    if any(t.scale is not None for t in (*app.inputs, *app.outputs)):
        out.append("Quantized tensors: feed <code>q = round(x / scale) + zero_point</code>, read <code>x = (q - zero_point) * scale</code>.")
        out.append("")
    out += _kotlin_example(app, PurePath(tflite).name)
    out.append("")
    return out
