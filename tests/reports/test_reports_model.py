"""The typed run report against the published JSON schema, and the one serializer.

The schema test walks the dataclass tree from ``RunReport`` (field types, and the return types of
the derived values named in ``JSON_KEYS``) beside the schema, and fails when an object has a key in
one and not the other.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest
from cli_harness import validate_report
from report_fixtures import full_report, skipped_report

from edge_export.reports.model import REPORT_SCHEMA_VERSION, RunReport, SkippedValidation, verdict_of
from edge_export.output.serialize import json_field, json_keys, to_json_value
from edge_export.plugins.report_sections import run_section

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "edge_export" / "reports" / "report.schema.json").read_text())

# Modules whose types the report tree names (model.py imports them for type checkers only).
_TYPE_MODULES = (
    "edge_export.constraints",
    "edge_export.flatbuffer",
    "edge_export.runtime.latency",
    "edge_export.llm.packaging",
    "edge_export.llm.recipes",
    "edge_export.llm.report",
    "edge_export.quantization",
    "edge_export.quantization.result",
    "edge_export.quantization.calibration",
    "edge_export.quantization.io_types",
    "edge_export.quantization.output_joins",
    "edge_export.quantization.bias_saturation",
    "edge_export.quantization.selection",
    "edge_export.quantization.sensitivity",
    "edge_export.quantization.mixed_precision",
    "edge_export.quantization.mixed_precision.report",
    "edge_export.targets.edgetpu.mapping",
    "edge_export.targets.edgetpu.compiler",
    "edge_export.targets.edgetpu.rewrites",
    "edge_export.targets.edgetpu.report",
    "edge_export.graph.applied_rewrites",
    "edge_export.targets.gpu.report",
    "edge_export.targets.gpu.precision",
    "edge_export.targets.micro.target",
    "edge_export.targets.micro.report",
    "edge_export.targets.micro.budgets",
    "edge_export.targets.micro.cmsis_nn",
    "edge_export.targets.micro.ethosu",
    "edge_export.validators.accuracy",
    "edge_export.validators.layers",
    "edge_export.validators.output_kinds",
    "edge_export.validators.parity",
    "edge_export.validators.runtimes",
    "edge_export.validators.stability",
    "edge_export.reports.baseline",
    "edge_export.reports.model",
    "edge_export.conversion.transpose_report",
    "edge_export.config",
)


def _namespace() -> dict:
    ns: dict = {}
    for name in _TYPE_MODULES:
        ns.update(vars(importlib.import_module(name)))
    return ns


NS = _namespace()
_RUN_SECTIONS = {"language_model": run_section("language_model")}  # registered by llm.report, imported above


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _hint_of(cls: type, attribute: str):
    """The type of one JSON key: a field's annotation, a declared run section's type (the language
    model's: reports/ do not import llm/), or a derived value's return annotation."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if attribute in _RUN_SECTIONS and cls.__name__ == "RunReport":
        return _RUN_SECTIONS[attribute].type | None
    if attribute in fields:
        return typing.get_type_hints(cls, globalns=NS)[attribute]
    member = getattr(cls, attribute)
    function = member.fget if isinstance(member, property) else member
    return typing.get_type_hints(function, globalns=NS)["return"]


def _members(hint) -> list:
    """The alternatives of a union (None left out), or the type itself."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [m for m in typing.get_args(hint) if m is not type(None)]
    return [hint]


def _object_keys(cls: type) -> tuple[dict, bool]:
    """JSON key -> type hint, with flattened members' keys inlined; and whether the object is open
    (a flattened mapping adds keys the types do not name, e.g. a target's extra artifacts)."""
    keys, open_ended = {}, False
    for key in json_keys(cls):
        hint = _hint_of(cls, key.attribute)
        if key.flatten:
            for member in _members(hint):
                if dataclasses.is_dataclass(member):
                    inner, inner_open = _object_keys(member)
                    keys.update(inner)
                    open_ended |= inner_open
                else:
                    open_ended = True
            continue
        keys[key.key] = hint
    return keys, open_ended


def _views(cls: type) -> list:
    """The types a dataclass is written as (``json_view`` replaces it with another typed value)."""
    if hasattr(cls, "json_view"):
        return _members(typing.get_type_hints(cls.json_view, globalns=NS)["return"])
    return [cls]


def _walk(hint, node: dict, path: str, problems: list[str]) -> None:
    node = _resolve(node)
    members = _members(hint)
    objects = [v for m in members if dataclasses.is_dataclass(m) for v in _views(m)]
    if objects:
        branches = [_resolve(b) for b in node.get("oneOf", [node])]
        branches = [b for b in branches if "properties" in b or b.get("type") == "object"]
        by_branch: dict[int, list] = {}
        for cls in objects:
            keys, _ = _object_keys(cls)
            # the schema branch this type is written as: the one sharing the most keys
            best = max(range(len(branches)), key=lambda i: len(set(branches[i].get("properties", {})) & set(keys)), default=None)
            if best is None or "properties" not in branches[best]:
                problems.append(f"{path} ({cls.__name__}): the schema lists no properties")
                continue
            by_branch.setdefault(best, []).append(cls)
        for index, classes in by_branch.items():
            props = branches[index]["properties"]
            keys, open_ended, names = {}, False, " | ".join(c.__name__ for c in classes)
            for cls in classes:  # the alternatives one schema object describes (export or validate)
                more, more_open = _object_keys(cls)
                keys.update(more)
                open_ended |= more_open
            for key in sorted(set(keys) - set(props)):
                problems.append(f"{path}.{key}: in {names}, not in the schema")
            for key in sorted(set(props) - set(keys)) if not open_ended else ():
                problems.append(f"{path}.{key}: in the schema, not in {names}")
            for key in sorted(set(keys) & set(props)):
                _walk(keys[key], props[key], f"{path}.{key}", problems)
        return
    for member in members:
        origin = typing.get_origin(member)
        if origin in (tuple, list):
            args = [a for a in typing.get_args(member) if a is not Ellipsis]
            items = next((_resolve(b).get("items") for b in node.get("oneOf", [node]) if "items" in _resolve(b)), None)
            if args and items is not None:
                _walk(args[0], items, f"{path}[]", problems)


def test_the_schema_and_the_report_types_have_the_same_keys():
    problems: list[str] = []
    _walk(RunReport, SCHEMA, "report", problems)
    assert not problems, "\n".join(problems)


def test_the_walk_finds_a_key_missing_from_the_schema():
    """The check above can fail: a schema without one property is reported."""
    trimmed = json.loads(json.dumps(SCHEMA))
    del trimmed["properties"]["flatbuffer"]["properties"]["sha256"]
    problems: list[str] = []
    _walk(RunReport, trimmed, "report", problems)
    assert problems == ["report.flatbuffer.sha256: in FlatbufferSection, not in the schema"]


def test_hand_built_reports_are_valid_against_the_schema():
    for report in (full_report(), skipped_report()):
        data = validate_report(to_json_value(report))
        assert data["schema_version"] == REPORT_SCHEMA_VERSION == "1.1"
        assert list(data)[:7] == ["schema_version", "tool", "libraries", "created_at", "model", "inputs", "export"]
        assert list(data)[-2:] == ["verdict", "exit_code"]


def test_verdict_and_exit_code_come_from_the_sections():
    full = full_report()
    assert (full.verdict, full.exit_code) == ("failed", 1)  # per-layer gate and baseline failed
    passed = dataclasses.replace(full, per_layer=None, baseline=None)
    assert (passed.verdict, passed.exit_code) == ("passed", 0)
    assert (skipped_report().verdict, skipped_report().exit_code) == ("exported-unvalidated", 0)
    assert verdict_of(SkippedValidation("x"), None, None) == "exported-unvalidated"


# ---- the serializer -------------------------------------------------------------------------------


class Colour(str, enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Inner:
    a: int
    b: str | None = None


@dataclasses.dataclass(frozen=True)
class Outer:
    colour: Colour
    class_name: str = json_field(name="class")
    hidden: object = json_field(skip=True, default=None)
    maybe: int | None = json_field(default=None, omit_none=True)
    inner: Inner = json_field(default=Inner(1), flatten=True)
    seconds: float = json_field(default=1.23456, digits=3)
    shape: tuple[int, ...] = (1, 2)
    values: Mapping = dataclasses.field(default_factory=lambda: {1: math.inf, "x": math.nan, "y": 2.5})

    JSON_KEYS = ("doubled", "colour", "class_name", "hidden", "maybe", "inner", "seconds", "shape", "values", "describe")

    @property
    def doubled(self) -> int:
        return 2 * self.inner.a

    def describe(self) -> str:
        return f"outer {self.class_name}"


def test_serializer_declared_options():
    data = to_json_value(Outer(Colour.RED, "Net", hidden=object()))
    assert data == {
        "doubled": 2,
        "colour": "red",
        "class": "Net",
        "a": 1,
        "b": None,
        "seconds": 1.235,
        "shape": [1, 2],
        "values": {"1": None, "x": None, "y": 2.5},
        "describe": "outer Net",
    }
    assert list(data)[:3] == ["doubled", "colour", "class"]  # JSON_KEYS order
    assert to_json_value(Outer(Colour.RED, "Net", maybe=3))["maybe"] == 3
    json.dumps(data, allow_nan=False)


def test_serializer_refuses_what_has_no_json_form():
    with pytest.raises(TypeError, match="object has no JSON form"):
        to_json_value(object())

    @dataclasses.dataclass(frozen=True)
    class Wrong:
        a: int
        JSON_KEYS = ("a", "b")

    with pytest.raises(TypeError, match="names 'b'"):
        to_json_value(Wrong(1))


def test_quantization_parameters_are_per_tensor_or_summarized_per_channel():
    from edge_export.flatbuffer import QuantParams

    assert to_json_value(QuantParams((0.5,), (3,))) == {"per_channel": False, "scale": 0.5, "zero_point": 3}
    assert to_json_value(QuantParams((0.5, 0.25), (0, 0), 1)) == {
        "per_channel": True, "channels": 2, "quantized_dimension": 1, "scale_min": 0.25, "scale_max": 0.5,
    }


def test_no_hand_written_to_dict_is_left():
    package = Path(__file__).resolve().parents[2] / "edge_export"
    found = [str(p.relative_to(package)) for p in package.rglob("*.py") if "def to_dict" in p.read_text()]
    assert found == []


def test_every_declared_target_section_has_the_keys_of_its_schema():
    """The target section is open (targets declare their sections, ReportSection): each declared
    section's type is walked against the published schema's entry under target, like the rest."""
    from edge_export.targets.registry import declared_report_sections

    target_props = SCHEMA["properties"]["target"]["properties"]
    problems: list[str] = []
    declared = declared_report_sections()
    assert {"edgetpu", "compiler", "delegate", "micro", "budgets", "cmsis_nn", "ethos_u", "gpu", "gpu_precision"} <= set(declared)
    for key, section in declared.items():
        assert key in target_props, f"target.{key} is declared by a built-in target but not in report.schema.json"
        _walk(section.type, target_props[key], f"report.target.{key}", problems)
    assert not problems, "\n".join(problems)
