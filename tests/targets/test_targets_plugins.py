"""The target interface: a target added in one module (here, in this test file) is picked up by the
API without any edit to api.py; the built-in targets, runners and Edge TPU rules use the same interface."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_harness import REPO, read_report
from model_zoo import SmallCNN

from edge_export.config import QuantizeMode
from edge_export.errors import UsageError
from edge_export.targets.base import (
    FinishedTarget,
    PreparedModule,
    RewrittenFlatbuffer,
    Runner,
    TargetArtifact,
    TargetCheck,
    TargetPlugin,
    get_target,
    litert_runner,
    register_target,
    unregister_target,
)

X = torch.randn(1, 3, 16, 16)


class CountingRunner:
    """A runner of the throwaway target: the LiteRT interpreter, counting the samples it runs in a
    file (parity runs its runner in a child process, so an attribute would not reach the test)."""

    name = "throwaway runtime"

    def __init__(self, model, log: Path) -> None:
        self._runner = litert_runner(model)
        self.inputs, self.outputs = self._runner.inputs, self._runner.outputs
        self.log = log

    def run(self, arrays):
        with self.log.open("a") as f:
            f.write("run\n")
        return self._runner.run(arrays)


class ThrowawayTarget(TargetPlugin):
    """Implies fp16 and refuses integer modes; adds an artifact listing the model's operators."""

    name = "throwaway"
    check_label = "Checking the throwaway target"

    def __init__(self) -> None:
        self.hooks: list[str] = []

    def implied_options(self, options):
        quantize = options.quantization.quantize
        if quantize.is_integer:
            raise UsageError(f"--target throwaway runs float models, not --quantize {quantize.value}.")
        if quantize is QuantizeMode.NONE:
            return options.with_values(quantize=QuantizeMode.FP16), ["--target throwaway implies --quantize fp16"]
        return options, []

    def output_paths(self, options, tflite_path):
        return [("the operator list", tflite_path.with_suffix(".ops.json")), ("the size note", tflite_path.with_suffix(".size.txt"))]

    def prepare_module(self, module, example):
        self.hooks.append("prepare_module")
        return PreparedModule(module, {"prepared": type(module).__name__})

    def rewrite_flatbuffer(self, model):
        self.hooks.append("rewrite_flatbuffer")
        return RewrittenFlatbuffer(model, {"rewritten": False})

    def check(self, context):
        self.hooks.append("check")
        ops = sorted(context.model.op_counts)
        artifact = TargetArtifact("operator_list", context.tflite_path.with_suffix(".ops.json"), json.dumps(ops).encode())

        def make_runner() -> CountingRunner:
            return CountingRunner(context.model, context.tflite_path.with_name("runner.log"))

        return TargetCheck({"throwaway": {"ops": ops}}, (artifact,), runner=make_runner)

    def finish(self, run):
        # One hook on the file as written: it sees the verdict so far and adds an entry and a file.
        self.hooks.append("finish")
        note = f"{run.model.size_bytes} bytes, verdict {run.report.verdict}"
        entries = {"written": {"size_bytes": run.model.size_bytes}}
        assert run.report_with(entries).target.extra["written"] == entries["written"]
        return FinishedTarget(entries, (TargetArtifact("size_note", run.tflite_path.with_suffix(".size.txt"), note.encode()),))


@pytest.fixture
def throwaway_target():
    plugin = register_target(ThrowawayTarget())
    yield plugin
    unregister_target(plugin.name)


def test_a_target_registered_outside_api_is_used_by_export(tmp_path, throwaway_target):
    import edge_export

    result = edge_export.export(SmallCNN().eval(), example_inputs=(X,), output=tmp_path / "m.tflite", target="throwaway", samples=3)

    assert result.exit_code == 0, result.report["validation"]
    report = result.report
    # implied options
    assert report["export"]["quantize"] == "fp16" and report["export"]["target"] == "throwaway"
    assert report["target"]["implied"] == ["--target throwaway implies --quantize fp16"]
    # every hook ran, in the chain's order, and its sections reached the report
    assert throwaway_target.hooks == ["prepare_module", "rewrite_flatbuffer", "check", "finish"]
    assert report["target"]["prepared"] == "SmallCNN" and report["target"]["rewritten"] is False
    assert "CONV_2D" in report["target"]["throwaway"]["ops"]
    assert any(s["name"] == "target" for s in report["stages"])
    # parity ran through the target's runner
    assert (tmp_path / "runner.log").read_text().count("run") == 3 and report["validation"]["runtime"] == "throwaway runtime"
    # its artifact was written with the others and named in the report
    ops_file = tmp_path / "m.ops.json"
    assert json.loads(ops_file.read_text()) == report["target"]["throwaway"]["ops"]
    assert report["artifacts"]["operator_list"] == str(ops_file)
    # finish: its entry joined the target section, its file was written from the model as written
    written = tmp_path / "m.tflite"
    assert report["target"]["written"] == {"size_bytes": written.stat().st_size}
    assert (tmp_path / "m.size.txt").read_text() == f"{written.stat().st_size} bytes, verdict passed"
    assert report["artifacts"]["size_note"] == str(tmp_path / "m.size.txt")
    # the report as written validates against the published schema: a plugin's name and own keys too
    written = read_report(tmp_path / "m.tflite")
    assert written["export"]["target"] == written["target"]["name"] == "throwaway"


def test_the_schema_takes_any_registrable_target_name_and_documents_the_builtin_ones():
    """report.schema.json's target_name is the pattern register_target enforces, not a list, so a
    plugin's report validates; its examples are exactly the targets this package registers."""
    import re

    import jsonschema

    from edge_export.targets.base import TARGET_NAME_PATTERN, registered_targets

    schema = json.loads((REPO / "edge_export" / "reports" / "report.schema.json").read_text())
    target_name = schema["$defs"]["target_name"]
    assert target_name["pattern"] == TARGET_NAME_PATTERN and "enum" not in target_name
    builtin = {name for name, plugin in registered_targets().items() if type(plugin).__module__.startswith("edge_export.")}
    assert set(target_name["examples"]) == builtin >= {"cpu", "edgetpu", "micro", "gpu"}
    for name in ("throwaway", "derived-micro", "ethos-u55-128", "vendor.npu_v2"):
        jsonschema.validate(name, target_name)
    for name in ("Throwaway", "my target", "-x", "", "../x"):
        assert not re.fullmatch(TARGET_NAME_PATTERN, name)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(name, target_name)

    class BadlyNamedTarget(TargetPlugin):
        name = "My Target"

    with pytest.raises(ValueError, match="not a target name"):
        register_target(BadlyNamedTarget())
    assert "My Target" not in registered_targets()


def test_a_registered_target_refuses_what_it_refuses_and_other_targets_options(throwaway_target):
    from edge_export.api import ExportOptions, resolve_target_options

    with pytest.raises(UsageError, match="runs float models"):
        resolve_target_options(ExportOptions.from_keywords(target="throwaway", quantize="int8"))
    with pytest.raises(UsageError, match="--delegate applies to --target edgetpu only"):
        resolve_target_options(ExportOptions.from_keywords(target="throwaway", delegate="edgetpu"))
    with pytest.raises(UsageError, match=r"--emit-op-resolver applies to --target micro or --target ethos-u55-128 \(any ethos-u target\) only"):
        resolve_target_options(ExportOptions.from_keywords(target="throwaway", emit_op_resolver="ops.h"))


def test_unknown_target_names_the_known_ones():
    from edge_export.api import ExportOptions

    with pytest.raises(UsageError) as caught:
        ExportOptions.from_keywords(target="nonesuch")
    assert "nonesuch" in caught.value.message and "cpu, edgetpu, micro" in caught.value.hint


@pytest.mark.parametrize(
    "target, implied, notes_count",
    [
        ("cpu", {"quantize": "none", "io_dtype": None}, 0),
        ("edgetpu", {"quantize": "int8", "channels_last": True, "io_dtype": "uint8"}, 3),
        ("micro", {"quantize": "int8", "channels_last": True, "io_dtype": "int8", "strip_names": True, "part_scales": False}, 5),
    ],
)
def test_builtin_targets_imply_what_they_did(target, implied, notes_count):
    from edge_export.api import ExportOptions, resolve_target_options

    options, notes = resolve_target_options(ExportOptions.from_keywords(target=target))
    assert get_target(target).name == target
    for field, value in implied.items():
        got = options.value(field)
        assert getattr(got, "value", got) == value
    assert len(notes) == notes_count and all(note.startswith(f"--target {target} implies") for note in notes)


def test_micro_no_longer_ignores_edge_tpu_options():
    from edge_export.api import ExportOptions, resolve_target_options

    with pytest.raises(UsageError, match="--delegate applies to --target edgetpu only"):
        resolve_target_options(ExportOptions.from_keywords(target="micro", delegate="edgetpu"))
    with pytest.raises(UsageError, match="--edgetpu-compiler and --delegate apply to --target edgetpu only"):
        resolve_target_options(ExportOptions.from_keywords(target="micro", delegate="edgetpu", edgetpu_compiler="c"))
    with pytest.raises(UsageError, match=r"applies to --target micro or --target ethos-u55-128 \(any ethos-u target\) only"):
        resolve_target_options(ExportOptions.from_keywords(target="edgetpu", emit_op_resolver="ops.h"))


def test_runners_share_one_protocol(tmp_path):
    import edge_export
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner
    from edge_export.targets.edgetpu.target import EdgeTPUDelegateRunner
    from edge_export.targets.micro.runner import MicroRunner

    result = edge_export.export(SmallCNN().eval(), example_inputs=(X,), output=tmp_path / "m.tflite", validate=False)
    data = result.tflite_path.read_bytes()
    runner = TFLiteRunner(read_flatbuffer(data))
    assert isinstance(runner, Runner) and runner.name == "ai-edge-litert interpreter (CPU, XNNPACK)"
    # MicroRunner and the delegate runner need an int8 model or libedgetpu; their class attributes say
    # the rest of the protocol is there.
    assert MicroRunner.name == "TFLite Micro host interpreter"
    assert EdgeTPUDelegateRunner.name == "ai-edge-litert interpreter with the Edge TPU delegate"
    for cls in (MicroRunner, EdgeTPUDelegateRunner):
        assert callable(cls.run)


def test_every_edgetpu_rule_is_for_a_supported_operator():
    """A rule registered under a misspelt or unsupported opcode would never run."""
    from edge_export.targets.edgetpu.rules import EDGETPU_RULES, SUPPORTED_OPS

    assert EDGETPU_RULES.opcodes and EDGETPU_RULES.opcodes <= SUPPORTED_OPS
    assert [r.__name__ for r in EDGETPU_RULES.rules_for("CONCATENATION")] == [
        "_no_fused_activation",
        "_concatenation_constant_inputs",
    ]


def test_api_has_no_target_branches():
    """api.py keeps the chain of stages; what differs per target lives in the target modules."""
    source = (Path(__file__).resolve().parents[2] / "edge_export" / "api.py").read_text()
    for name in ("Target.EDGETPU", "Target.MICRO", "Target.CPU", "MicroRunner", "edgetpu_rewrites", "type(runner)"):
        assert name not in source.replace("target: Target | str = Target.CPU", ""), name


def test_a_target_derived_from_micro_inherits_its_rules_and_options():
    """How the Ethos-U targets build on micro: a subclass, registered under its own name."""
    from edge_export.api import ExportOptions, resolve_target_options
    from edge_export.targets.micro.target import MicroTarget

    class DerivedMicroTarget(MicroTarget):
        name = "derived-micro"

    register_target(DerivedMicroTarget())
    try:
        options, notes = resolve_target_options(ExportOptions.from_keywords(target="derived-micro", emit_op_resolver="ops.h"))
        assert options.quantization.quantize is QuantizeMode.INT8 and options.layout.io_dtype.value == "int8"
        assert notes[0] == "--target derived-micro implies --quantize int8 (full integer)"
        with pytest.raises(UsageError, match=r"applies to --target micro or --target derived-micro or --target ethos-u55-128 \(any ethos-u target\) only"):
            resolve_target_options(ExportOptions.from_keywords(target="cpu", emit_op_resolver="ops.h"))
    finally:
        unregister_target("derived-micro")


def test_cli_target_is_any_registered_name_and_an_unknown_one_is_exit_2(tmp_path, run_cli):
    result = run_cli("pkg.module:Net", "--input-shape", "1,3,8,8", "--target", "bogus", "-o", tmp_path / "m.tflite")
    assert result.exit_code == 2
    assert "--target bogus is not known" in result.stderr and "edgetpu" in result.stderr and "micro" in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())
