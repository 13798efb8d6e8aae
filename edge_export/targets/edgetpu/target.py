"""The Coral Edge TPU target: the chain's hooks, built from the Edge TPU modules beside it.

    implied options   int8 (full integer), NHWC image I/O, uint8 I/O
    inputs            batch 1, static shapes (edgetpu.check_edgetpu_inputs)
    module rewrites   rewrites.prepare_module_for_edgetpu
    flatbuffer pass   rewrites.reorder_for_edgetpu
    checks            the predicted mapping (edgetpu.check_edgetpu), then edgetpu_compiler when present
    artifacts         <stem>_edgetpu.tflite and <stem>_edgetpu.log from the compiler
    parity runner     the LiteRT interpreter, or with --delegate edgetpu the Edge TPU delegate
"""

from __future__ import annotations

import functools
import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from ...config import IODtype
from ...errors import UsageError
from .options import EdgeTpuOptions
from .report import EDGETPU_REPORT_SECTIONS, CompilerSection, DelegateSection
from ..base import (
    PreparedModule,
    RewrittenFlatbuffer,
    TargetArtifact,
    TargetCheck,
    TargetContext,
    TargetPlugin,
    imply_full_integer_int8,
    imply_io_dtype,
    register_target,
)

if TYPE_CHECKING:
    import numpy as np

    from ...options import ExportOptions
    from ...flatbuffer import FlatbufferModel
    from ...runtime.interpreter import IOTensor

__all__ = ["EdgeTPUTarget", "EdgeTPUDelegateRunner"]


class EdgeTPUDelegateRunner:
    """Parity through libedgetpu. It runs the compiled model when there is one (its edgetpu-custom op
    is what the delegate executes); without it, the delegate has nothing to take over."""

    name = "ai-edge-litert interpreter with the Edge TPU delegate"

    def __init__(self, model: FlatbufferModel | bytes, delegate: Any) -> None:
        from ...runtime.interpreter import TFLiteRunner

        self._runner = TFLiteRunner(model, delegates=[delegate])
        self.inputs: list[IOTensor] = self._runner.inputs
        self.outputs: list[IOTensor] = self._runner.outputs

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._runner.run(arrays)


def _compiled_paths(tflite_path: Path) -> tuple[Path, Path]:
    return (
        tflite_path.with_name(f"{tflite_path.stem}_edgetpu.tflite"),
        tflite_path.with_name(f"{tflite_path.stem}_edgetpu.log"),
    )


class EdgeTPUTarget(TargetPlugin):
    name = "edgetpu"
    report_sections = EDGETPU_REPORT_SECTIONS
    options_class: ClassVar[type[EdgeTpuOptions]] = EdgeTpuOptions
    requires_full_integer = True
    mixed_precision_promotions = ()  # int8 only: no int16 or float kernels on the TPU
    check_label = "Checking the Edge TPU mapping"

    def implied_options(self, options: ExportOptions) -> tuple[ExportOptions, list[str]]:
        options, implied = imply_full_integer_int8(options, self.name)
        if not options.layout.channels_last:
            options = options.with_values(channels_last=True)
            implied.append("--target edgetpu implies NHWC image I/O (--channels-last)")
        options, io_note = imply_io_dtype(options, self.name, IODtype.UINT8, "what Coral apps expect")
        return options, implied + io_note

    def output_paths(self, options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
        model, log = _compiled_paths(tflite_path)
        return [("the Edge TPU compiled model", model), ("the Edge TPU compiler log", log)]

    def check_inputs(self, specs: Sequence[Any]) -> None:
        from .checks import check_edgetpu_inputs

        check_edgetpu_inputs(specs)

    def prepare_module(self, module: Any, example: tuple) -> PreparedModule:
        from .rewrites import prepare_module_for_edgetpu

        prep = prepare_module_for_edgetpu(module, example)
        return PreparedModule(prep.module, {"rewrites": prep.rewrites})

    def rewrite_flatbuffer(self, model: FlatbufferModel) -> RewrittenFlatbuffer:
        # FLATBUFFER PASS: the Edge TPU operator reorder. The one place the Edge TPU target runs a
        # flatbuffer pass; the pass pipeline (issue 9, item 3) may take it over from here.
        from .rewrites import reorder_for_edgetpu

        model, reordered = reorder_for_edgetpu(model)
        return RewrittenFlatbuffer(model, {"reordered_operators": reordered})

    def check(self, context: TargetContext) -> TargetCheck:
        from ...errors import TargetError
        from .checks import check_edgetpu
        from .compiler import compare_with_prediction, compile_for_edgetpu, load_edgetpu_delegate, reattach_metadata, require_compiled

        options, tflite_path = context.options, context.tflite_path
        mapping = check_edgetpu(context.model, source_module=context.source_module)

        report: dict[str, Any] = {"edgetpu": mapping}
        artifacts: list[TargetArtifact] = []
        model_path, log_path = _compiled_paths(tflite_path)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / f"{tflite_path.stem}.tflite"
            src.write_bytes(context.model.data)
            result = compile_for_edgetpu(src, tmp, explicit_compiler=options.target_options.edgetpu_compiler, timeout_s=options.target_options.timeout_s)
            report["compiler"] = CompilerSection(result, tuple(compare_with_prediction(mapping, result)))
            if options.target_options.require_compiler:
                require_compiled(result)
            if result.compiled and result.compiled_model:
                compiled = Path(result.compiled_model)
                compiled_bytes = compiled.read_bytes()
                if context.metadata is not None:  # the compiler drops it: the app deploys this file
                    compiled_bytes = reattach_metadata(compiled_bytes, context.metadata)
                artifacts.append(TargetArtifact("edgetpu_tflite", model_path, compiled_bytes))
                log = compiled.with_suffix(".log")
                if log.is_file():
                    artifacts.append(TargetArtifact("edgetpu_log", log_path, log.read_bytes()))
        runner = None
        if options.target_options.delegate == "edgetpu":
            try:
                delegate = load_edgetpu_delegate()
            except TargetError as exc:
                report["delegate"] = DelegateSection("edgetpu", False, exc.message)
            else:
                report["delegate"] = DelegateSection("edgetpu", True, "")
                # The compiled model is bytes from the compiler (an edge): the runner verifies it.
                compiled = artifacts[0].data if artifacts else context.model
                runner = functools.partial(EdgeTPUDelegateRunner, compiled, delegate)
        label = "the LiteRT interpreter with the Edge TPU delegate" if runner is not None else None
        return TargetCheck(report, tuple(artifacts), runner, label)


register_target(EdgeTPUTarget())
