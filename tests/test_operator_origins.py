"""operator_origins: a refused flatbuffer operator is named with the aten call, the module and the
line of the user's code it came from (README: "Operators LiteRT cannot run")."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from edge_export.conversion.operator_origins import describe_operator_origins, operator_origin


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.gelu(self.fc(x))  # GELU: TFLite Micro has no kernel for it


class GeluNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block, self.out = Block(), nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.block(x))


class ReflectFront(nn.Module):
    """A 1-D reflect pad as litert-torch lowers it without rewrite_reflect_replicate_pads_pass."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5)

    def forward(self, x):
        return self.conv(F.pad(x, (2, 2), mode="reflect"))


def _line_of(cls: type, text: str) -> str:
    lines, start = inspect.getsourcelines(cls)
    return f"{inspect.getsourcefile(cls)}:{start + next(i for i, line in enumerate(lines) if text in line)}"


def _converted(module: nn.Module, example: tuple):
    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer

    return read_flatbuffer(convert_module(module.eval(), example))


def test_a_select_is_traced_back_to_the_reflect_pad_that_made_it():
    module, example = ReflectFront().eval(), (torch.randn(1, 1, 32),)
    model = _converted(module, example)
    origin = operator_origin(model, "SELECT", module)
    assert (origin.aten, origin.module_path, origin.module_type) == ("aten.reflection_pad1d", "", "ReflectFront")
    assert origin.source == _line_of(ReflectFront, "F.pad(")
    assert origin.describe() == f"SELECT (from aten.reflection_pad1d) in module '<root>' (ReflectFront), at {origin.source}"


def test_an_operator_in_a_submodule_names_the_submodule_and_its_line():
    module = GeluNet().eval()
    model = _converted(module, (torch.randn(1, 8),))
    text = describe_operator_origins(model, ("GELU",), module)
    assert text == f"GELU (from aten.gelu) in module 'block' (Block), at {_line_of(Block, 'F.gelu(')}"


def test_without_a_module_the_tensor_names_still_give_the_module():
    model = _converted(GeluNet(), (torch.randn(1, 8),))
    origin = operator_origin(model, "GELU")
    assert (origin.module_path, origin.module_type, origin.aten, origin.source) == ("block", "Block", None, None)
    assert operator_origin(model, "CUMSUM").describe() == "CUMSUM"  # not in the model: nothing to name


@pytest.mark.slow
def test_the_micro_refusal_names_the_aten_call_module_and_line(tmp_path):
    import edge_export
    from edge_export.errors import ConversionError

    with pytest.raises(ConversionError) as refused:
        edge_export.export(
            GeluNet().eval(), example_inputs=(torch.randn(1, 8),), output=tmp_path / "gelu.tflite", target="micro",
            samples=2, calibration_samples=8, no_emit_c=True,
        )
    assert refused.value.exit_code == 3
    assert f"no kernel for GELU (from aten.gelu) in module 'block' (Block), at {_line_of(Block, 'F.gelu(')}" in refused.value.message
    assert not (tmp_path / "gelu.tflite").exists()  # no partial output


def test_the_tflite_micro_interpreter_rejection_names_the_module():
    from edge_export.errors import RuntimeRunError
    from edge_export.targets.micro.runner import MicroRunner

    model = _converted(GeluNet(), (torch.randn(1, 8),))
    with pytest.raises(RuntimeRunError) as rejected:  # TFLM's own log, read by MicroRunner
        MicroRunner(model)
    assert "it has no kernel for GELU in module 'block' (Block)." in rejected.value.message


class Accumulate(nn.Module):
    def forward(self, x):  # STABLEHLO_SCATTER: LiteRT's interpreter refuses to prepare it
        return torch.zeros(2, 8).scatter_add(1, torch.tensor([[0, 2, 1, 3]]).expand(2, 4), x[:, :4])


class ScatterHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.accumulate = nn.Linear(8, 8), Accumulate()

    def forward(self, x):
        return self.accumulate(self.fc(x))


@pytest.mark.slow
def test_litert_refusing_to_prepare_an_operator_names_the_aten_call_and_line():
    """A real "failed to prepare" from LiteRT's interpreter, met where parity runs the model (in a
    child process): the error names the aten call and the user's line, not only the opcode and the
    module. (An export refuses scatter_add before conversion; converted here without that pass.)"""
    from edge_export.graph.channels_last import plan_channels_last
    from edge_export.errors import RuntimeRunError
    from edge_export.options import ExportOptions
    from edge_export.stages.parity import run_parity

    module, example = ScatterHead().eval(), (torch.randn(2, 8),)
    model = _converted(module, example)
    with pytest.raises(RuntimeRunError) as caught:
        run_parity(module, [example], ExportOptions.from_keywords(), model, plan_channels_last([2], [2]))
    message = caught.value.message
    assert "failed to prepare" in message
    line = _line_of(Accumulate, "scatter_add")
    index = next(op.index for op in model.operators if op.opcode == "STABLEHLO_SCATTER")
    assert f"is #{index} STABLEHLO_SCATTER (from aten.scatter_add) in module 'accumulate' (Accumulate), at {line}." in message
