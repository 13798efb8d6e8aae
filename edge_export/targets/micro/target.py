"""The microcontroller target: TFLite Micro (TFLM) operator support, arena size, host runs.

What TFLM can run is narrower than LiteRT: only the kernels an application registers in its
``MicroMutableOpResolver`` (``kernels.py``, which also writes the C++ resolver lines), each for some
tensor types only (``kernel_types.py``: SQRT is float32 only, refused before TFLM runs), integer I/O
in practice, and every byte of activation memory in one tensor arena whose size the firmware fixes
at build time (``checks.py``). The target checks a flatbuffer against those rules, runs it through
the TFLM host interpreter of the ``tflite-micro`` package for parity and to measure the arena it
really needs (``runner.py``), and finishes with the budgets and the firmware bundle (``bundle.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ...config import IODtype
from ...errors import UsageError
from .budgets import BUDGETS_REPORT_SECTION
from .checks import check_micro
from .cmsis_nn import CMSIS_NN_REPORT_SECTION
from .kernel_types import INT16_KERNELS, kernel_type_fix
from .kernels import emit_op_resolver, resolver_method
from .report import MICRO_REPORT_SECTION, CBundleSection, MicroReport, MicroSection
from .runner import MicroRunner, make_test_vectors
from .options import MicroOptions
from ..base import (
    FinishedRun,
    FinishedTarget,
    TargetArtifact,
    TargetCheck,
    TargetContext,
    TargetPlugin,
    imply_full_integer_int8,
    imply_io_dtype,
    register_target,
)

if TYPE_CHECKING:
    from ...options import ExportOptions

__all__ = ["MicroTarget"]


# ---- the target ---------------------------------------------------------------------------------


class MicroTarget(TargetPlugin):
    """``--target micro``: full-integer int8 with int8 NHWC I/O and inner tensor names stripped (their
    map written beside the model), checked against TFLite Micro's kernels, parity and the arena
    measured in its host interpreter, and the op resolver lines on request."""

    name = "micro"
    report_sections = (MICRO_REPORT_SECTION, BUDGETS_REPORT_SECTION, CMSIS_NN_REPORT_SECTION)
    options_class: ClassVar[type[MicroOptions]] = MicroOptions
    requires_full_integer = True
    # TFLite Micro ignores metadata: it would only cost flash (--labels stays a parity option).
    carries_metadata = False
    mixed_precision_promotions = ("int16",)  # int16x8 kernels (reference and CMSIS-NN); no float wanted
    int16_opcodes = INT16_KERNELS  # TFLM's kernels that take int16 (kernel_types.py): MIRROR_PAD does not
    check_label = "Checking TFLite Micro support"

    def implied_options(self, options: ExportOptions) -> tuple[ExportOptions, list[str]]:
        options, implied = imply_full_integer_int8(options, self.name)
        if options.layout.io_dtype not in (None, IODtype.INT8):
            raise UsageError(
                f"--target {self.name} needs int8 model inputs and outputs, but --io-dtype {options.layout.io_dtype.value} was given.",
                f"Drop --io-dtype ({self.name} implies int8).",
            )
        options, io_note = imply_io_dtype(options, self.name, IODtype.INT8)
        implied += io_note
        if options.quantization.part_scales:  # a joined output keeps its parts' scales only as a float output
            options = options.with_values(part_scales=False)
            implied.append(f"--target {self.name} implies --no-part-scales (its outputs are int8, one scale each)")
        if not options.layout.channels_last:
            # Sensors and camera pipelines deliver NHWC; NCHW I/O would cost a TRANSPOSE at each
            # image input and output (flash, arena and time on the device).
            options = options.with_values(channels_last=True)
            implied.append(f"--target {self.name} implies NHWC image I/O (--channels-last)")
        if not options.outputs.strip_names and not options.outputs.keep_names:
            # Names are ~15% of a small int8 CNN's flash and TFLM never reads them; the tensor-name
            # map written beside the model keeps per-layer debugging possible.
            options = options.with_values(strip_names=True)
            implied.append(
                f"--target {self.name} implies --strip-names (the names go to <stem>.tensors.json; --keep-names keeps them)"
            )
        if options.target_options.emit_c and options.target_options.no_emit_c:
            raise UsageError(
                f"--emit-c {options.target_options.emit_c} and --no-emit-c contradict each other.",
                "Keep one: --emit-c DIR writes the firmware bundle there, --no-emit-c writes none.",
            )
        return options, implied

    def output_paths(self, options: ExportOptions, tflite_path: Path) -> list[tuple[str, Path]]:
        from ...artifacts.tensor_names import tensor_names_path

        paths = [("--emit-op-resolver", Path(options.target_options.emit_op_resolver))] if options.target_options.emit_op_resolver else []
        if options.outputs.strip_names:
            paths.append(("the tensor-name map (named after -o)", tensor_names_path(tflite_path)))
        bundle = _bundle_layout(options, tflite_path)
        if bundle is not None:
            folder, name = bundle
            if folder.exists() and not folder.is_dir():
                raise UsageError(
                    f"Cannot write the firmware bundle into {folder}: it is a file, not a folder.",
                    "Pass --emit-c with a folder path (it is created), or --no-emit-c.",
                )
            if folder.absolute() == tflite_path.absolute():
                raise UsageError(
                    f"--emit-c {folder} is the path of the .tflite itself.",
                    "Pass --emit-c a folder of its own (e.g. the default, <stem>_micro/ beside the .tflite).",
                )
            from .bundle import bundle_paths

            label = f"the firmware bundle ({'--emit-c' if options.target_options.emit_c else f'implied by --target {self.name}; --no-emit-c skips it'})"
            paths += [(label, p) for p in bundle_paths(folder, name)]
        return paths

    def check(self, context: TargetContext) -> TargetCheck:
        # Refused before any native run: TFLM would fail on these only when it invokes the operator.
        _refuse_what_tflm_cannot_run(context, check_micro(context.model))
        from ...processes.isolation import run_isolated

        model = context.model

        def measure():  # raises RuntimeRunError naming the operator TFLM rejects
            runner = MicroRunner(model)
            return runner.arena_bytes, runner.report

        # TFLM runs in a child process (as every native run of a candidate model): a crash is exit 3.
        arena, micro_report = run_isolated(measure, stage="TFLite Micro arena measurement", backend="the TFLite Micro interpreter")

        artifacts = ()
        resolver_path = context.options.target_options.emit_op_resolver
        if resolver_path:
            artifacts = (TargetArtifact("op_resolver", Path(resolver_path), emit_op_resolver(micro_report.ops).encode()),)
        bundle = _bundle_layout(context.options, context.tflite_path)
        c_bundle = None
        if bundle is not None:
            from .bundle import TEST_TOLERANCE_STEPS, TEST_VECTOR_COUNT, arena_with_margin, bundle_paths

            folder, name = bundle
            c_bundle = CBundleSection(
                folder=str(folder),
                name=name,
                files=tuple(p.name for p in bundle_paths(folder, name)),
                arena_measured_bytes=arena,
                arena_size=arena_with_margin(arena),
                test_vectors=TEST_VECTOR_COUNT,
                tolerance_steps=TEST_TOLERANCE_STEPS,
            )
        section = MicroSection(micro_report, str(resolver_path) if resolver_path else None, c_bundle)
        from .cmsis_nn import check_cmsis_nn

        return TargetCheck(
            {"micro": section, "cmsis_nn": check_cmsis_nn(model)}, artifacts,
            runner=lambda: MicroRunner(model, arena_size=arena),
            runner_label="the TFLite Micro interpreter",
        )

    def finish(self, run: FinishedRun) -> FinishedTarget:
        """On the model as written (after --strip-names): the tensor-name map of a stripped model,
        flash (the written .tflite) and RAM (the arena TFLM measured) against --max-flash/--max-ram,
        and the firmware bundle, whose comments carry the report's headline and whose test vectors'
        expected outputs come from the host interpreter running that model."""
        artifacts: tuple[TargetArtifact, ...] = ()
        if run.options.outputs.strip_names:
            from ...artifacts.tensor_names import build_tensor_name_map, tensor_names_path

            artifacts += (
                TargetArtifact("tensor_names", tensor_names_path(run.tflite_path), build_tensor_name_map(run.named_model, run.model)),
            )
        entries = {"budgets": self._budgets(run)}
        section = run.checked.report.get("micro")
        bundle = getattr(section, "c_bundle", None)
        if bundle is None:
            return FinishedTarget(entries, artifacts)
        from ...version import __version__
        from ...processes.isolation import run_isolated
        from . import bundle as cb
        from .bundle_selftest import render_test_data, render_test_main

        model, seed = run.model, run.options.parity.seed
        vectors = run_isolated(
            lambda: make_test_vectors(model, bundle.arena_measured_bytes, bundle.test_vectors, seed),
            stage="TFLite Micro test vectors",
            backend="the TFLite Micro interpreter",
        )
        name, folder = bundle.name, Path(bundle.folder)
        headline = _report_headline(run.report_with(entries))
        data, source, ops = self._bundle_model(run)
        model_h, model_cc = cb.render_model_data(
            name, data, source=source, headline=headline,
            arena_measured=bundle.arena_measured_bytes, arena_size=bundle.arena_size, tool_version=__version__,
        )
        resolver = cb.render_op_resolver(name, emit_op_resolver(ops, function=f"{name}_register_ops"))
        test_h, test_cc = render_test_data(name, vectors, headline=headline)
        test_main = render_test_main(name, len({resolver_method(op) for op in ops}), vectors.inputs, vectors.outputs)
        texts = (model_h, model_cc, resolver, test_h, test_cc, test_main)
        keys = ("c_model_data_h", "c_model_data_cc", "c_op_resolver_h", "c_test_data_h", "c_test_data_cc", "c_test_cc")
        paths = cb.bundle_paths(folder, name)
        artifacts += tuple(TargetArtifact(key, path, text.encode()) for key, path, text in zip(keys, paths, texts))
        return FinishedTarget(entries, artifacts)

    def _bundle_model(self, run: FinishedRun) -> tuple[bytes, str, tuple[str, ...]]:
        """The model the firmware bundle embeds: its bytes, file name and operators (an Ethos-U
        target embeds the Vela-compiled model instead)."""
        return run.model.data, run.tflite_path.name, tuple(run.checked.report["micro"].report.ops)

    def _budgets(self, run: FinishedRun):
        """Flash (the written .tflite) and RAM (the arena TFLM measured) against --max-flash/--max-ram."""
        from .budgets import check_budgets, largest_activations, largest_constants

        micro = run.checked.report.get("micro")
        arena = micro.report.arena_bytes if micro is not None else None
        return check_budgets(
            flash_bytes=run.model.size_bytes,
            ram_bytes=arena,
            max_flash=run.options.target_options.max_flash,
            max_ram=run.options.target_options.max_ram,
            flash_consumers=largest_constants(run.named_model),
            ram_consumers=largest_activations(run.named_model),
            ram_measured="tensor arena (measured by the TFLite Micro host interpreter)",
            ram_note=(
                "The arena also holds TFLite Micro's own structures and kernel scratch, planned by TFLM with "
                "tensors sharing memory when their lifetimes do not overlap: these are the largest activations, "
                "not an exact breakdown."
            ),
        )





def _refuse_what_tflm_cannot_run(context: TargetContext, report: MicroReport) -> None:
    """A ConversionError (exit 3, raised before anything is written) for an operator TFLM has no
    kernel for, else for operators whose kernel does not take the type they get; each named with
    the aten call, module and line it came from."""
    from ...errors import ConversionError

    if report.unsupported_ops:
        from ...conversion.operator_origins import describe_operator_origins

        origins = describe_operator_origins(context.model, report.unsupported_ops, context.source_module)
        raise ConversionError(
            f"The model cannot run on TFLite Micro: it has no kernel for {origins}. " + " ".join(report.problems),
            "Replace those operators in the model (or pick --target cpu).",
        )
    mismatches = report.kernel_type_mismatches
    if mismatches:
        from ...conversion.operator_origins import operator_origins_at

        shown = mismatches[:_MISMATCHES_NAMED]
        # by index, not opcode: the operator TFLM would stop at, not the first of its kind
        origins = operator_origins_at(context.model, [m.operator_index for m in shown], context.source_module)
        named = "; ".join(
            f"operator #{m.operator_index} {origins[m.operator_index].describe()} gets {m.input_type}, "
            f"and TFLM's {m.opcode} kernel takes {' and '.join(m.kernel_types)}"
            for m in shown
        )
        more = f" (and {len(mismatches) - len(shown)} more such operators)" if len(mismatches) > len(shown) else ""
        raise ConversionError(
            f"The model cannot run on TFLite Micro: {named}{more}.",
            " ".join(dict.fromkeys(kernel_type_fix(m) for m in mismatches)),
        )


_MISMATCHES_NAMED = 5  # a model with 20 SQRTs gets the first five named, and a count


def _report_headline(report) -> str:
    """The verdict and the worst output's SQNR, for the bundle's comments."""
    validation = report.validation
    worst = validation.worst() if hasattr(validation, "worst") else None
    if worst is None:
        return f"verdict {report.verdict} (parity not checked)"
    sqnr = "n/a" if worst.sqnr_db is None or not math.isfinite(worst.sqnr_db) else f"{worst.sqnr_db:.1f} dB"
    return f"verdict {report.verdict}, worst output SQNR {sqnr} ({worst.output}), {validation.samples} samples on {validation.runtime}"


def _bundle_layout(options: ExportOptions, tflite_path: Path) -> tuple[Path, str] | None:
    """(folder, C name) of the firmware bundle, or None with --no-emit-c."""
    if options.target_options.no_emit_c:
        return None
    from .bundle import c_identifier

    folder = Path(options.target_options.emit_c) if options.target_options.emit_c else tflite_path.with_name(f"{tflite_path.stem}_micro")
    return folder, c_identifier(tflite_path.stem)


register_target(MicroTarget())
