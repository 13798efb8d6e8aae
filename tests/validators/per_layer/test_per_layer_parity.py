"""Per-layer parity on real conversions: fp32, PT2E int8, damaged layers, channels-last, a transformer."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from layer_models import INPUT_SHAPE, make_net, pt2e_int8, samples_for

from edge_export.conversion.litert import convert_module
from edge_export.errors import InputSpecError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.validators.layers import LayerParityReport, per_layer_parity
from edge_export.output.serialize import to_json_value

CNN_COMPARED = ["stem.2", "block.act", "block", "proj", "pool", "fc"]
CNN_FUSED = {"stem.0", "stem.1", "block.conv", "block.bn"}


def _paths(report: LayerParityReport) -> list[str]:
    return [row.module_path for row in report.layers]


def _sqnrs(report: LayerParityReport) -> list[tuple[str, float]]:
    return [(r.module_path, round(r.sqnr_db, 1)) for r in report.layers]


def _reasons(report: LayerParityReport) -> dict[str, str]:
    return {m.module_path: m.reason for m in report.unmatched_modules}


def _assert_graph_order(report: LayerParityReport, model_bytes: bytes) -> None:
    fm = read_flatbuffer(model_bytes)
    producer = {t: op.index for op in fm.operators for t in op.outputs}
    op_order = [producer[row.tflite_index] for row in report.layers]
    assert op_order == sorted(op_order)
    assert [row.position for row in report.layers] == list(range(len(report.layers)))


def test_fp32_cnn_every_layer_near_perfect(net, example, net_fp32_bytes):
    report = per_layer_parity(net, example, net_fp32_bytes, samples=samples_for(INPUT_SHAPE, 3, seed=11))

    assert _paths(report) == CNN_COMPARED
    _assert_graph_order(report, net_fp32_bytes)
    for row in report.layers:
        assert row.sqnr_db > 60.0, row
        assert row.cosine > 0.99999, row
    assert report.first_jump is None
    assert report.samples == 3
    assert report.passed is None and all(row.passed is None for row in report.layers)  # no gate given
    # Conv and BN folded into the ReLU's CONV_2D are reported as fused, attached to that row.
    assert _reasons(report) == {p: "fused" for p in CNN_FUSED}
    rows = {row.module_path: row for row in report.layers}
    assert rows["stem.2"].fused_modules == ("stem.0", "stem.1")
    assert set(rows["block.act"].fused_modules) == {"block.conv", "block.bn"}
    assert rows["stem.2"].also_outputs_of == ("stem",)  # the Sequential's output is its ReLU's
    assert rows["fc"].also_outputs_of == ("<model>",)
    # Conv activations are NHWC in the flatbuffer and NCHW in PyTorch.
    assert rows["proj"].shape == (1, 12, 16, 12) and rows["proj"].torch_shape == (1, 12, 12, 16)
    assert rows["proj"].layout == "NHWC->NCHW"
    assert report.tensors_unmatched == 0
    assert report.tensors_matched == len(CNN_COMPARED)
    assert report.modules_total == 12  # the model itself + 11 submodules
    assert report.match_fraction == pytest.approx(8 / 12)
    json.dumps(to_json_value(report))  # the JSON report can hold it


def test_int8_pt2e_cnn_dequantizes_and_stays_close(net, example, net_int8_bytes):
    report = per_layer_parity(net, example, net_int8_bytes, samples=samples_for(INPUT_SHAPE, 3, seed=12))

    assert _paths(report) == CNN_COMPARED
    assert {row.dtype for row in report.layers} == {"int8"}
    for row in report.layers:
        # int8 error, not float noise, and not damage either
        assert 20.0 < row.sqnr_db < 60.0, row
        assert row.cosine > 0.99, row
    assert report.first_jump is None
    assert report.worst is min(report.layers, key=lambda r: r.sqnr_db)
    # PT2E folds batch norm before conversion, so no tensor carries the BN names at all.
    reasons = _reasons(report)
    assert reasons["stem.1"] == reasons["block.bn"] == "no tensor"
    assert reasons["stem.0"] == reasons["block.conv"] == "fused"


def test_damaged_layer_in_module_copy_is_the_first_jump(net, example, net_fp32_bytes):
    damaged = copy.deepcopy(net)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        w = damaged.proj.weight
        w.copy_(w[torch.randperm(w.shape[0], generator=gen)])  # shuffle the 1x1 conv's filters
    damaged_bytes = convert_module(damaged, example)

    report = per_layer_parity(
        net, example, damaged_bytes, samples=samples_for(INPUT_SHAPE, 2, seed=13), min_sqnr_db=40.0
    )

    assert report.first_jump is not None
    assert report.first_jump.module_path == "proj"
    assert report.passed is False
    assert [r.module_path for r in report.layers if not r.passed] == ["proj", "pool", "fc"]
    assert report.first_jump.sqnr_db < 10.0
    before = report.layers[: report.first_jump.position]
    assert [r.module_path for r in before] == ["stem.2", "block.act", "block"]
    assert all(r.sqnr_db > 60.0 for r in before)
    assert report.worst.position >= report.first_jump.position


def test_damaged_weight_buffer_in_int8_flatbuffer_is_the_first_jump(net, example, net_int8_bytes):
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(net_int8_bytes))
    graph = model.subgraphs[0]
    damaged = 0
    for op in graph.operators:
        out_name = graph.tensors[op.outputs[0]].name.decode()
        if out_name.endswith(tuple(f"Conv2d_conv;{i}" for i in range(10))):
            buf = model.buffers[graph.tensors[op.inputs[1]].buffer]
            weights = np.frombuffer(bytes(buf.data), dtype=np.int8).copy()
            np.random.default_rng(0).shuffle(weights)
            buf.data = weights
            damaged += 1
    assert damaged == 1, "expected one CONV_2D whose name ends with block.conv's scope"
    damaged_bytes = bytes(flatbuffer_utils.convert_object_to_bytearray(model))

    report = per_layer_parity(net, example, damaged_bytes, samples=samples_for(INPUT_SHAPE, 2, seed=14))

    # block.conv's output only exists fused into block.act's CONV_2D: that row is the culprit and
    # names the conv.
    assert report.first_jump is not None
    assert report.first_jump.module_path == "block.act"
    assert "block.conv" in report.first_jump.fused_modules
    assert report.layers[0].module_path == "stem.2" and report.layers[0].sqnr_db > 20.0


def test_channels_last_io_conv_layers_compare_in_nchw(net, example, net_channels_last_bytes):
    fm = read_flatbuffer(net_channels_last_bytes)
    assert "TRANSPOSE" not in fm.op_counts  # the wrapper removed the boundary transposes
    assert fm.tensors[fm.inputs[0]].shape == (1, 12, 16, 3)

    report = per_layer_parity(net, example, net_channels_last_bytes, channels_last_inputs=(0,))

    assert _paths(report) == CNN_COMPARED  # the wrapper's "_wrapped" scope prefix is understood
    assert all(row.sqnr_db > 60.0 for row in report.layers)
    conv_rows = [row for row in report.layers if row.opcode == "CONV_2D"]
    assert len(conv_rows) == 3 and all(row.layout == "NHWC->NCHW" for row in conv_rows)


def test_channels_last_model_without_the_flag_is_a_clear_input_error(net, example, net_channels_last_bytes):
    with pytest.raises(InputSpecError) as info:
        per_layer_parity(net, example, net_channels_last_bytes)
    assert "channels_last_inputs=(0,)" in str(info.value)


def test_transformer_encoder_layer(encoder, encoder_fp32_bytes):
    rng = np.random.default_rng(15)
    samples = [(rng.standard_normal((1, 5, 16)).astype(np.float32),) for _ in range(2)]
    example = (torch.from_numpy(samples[0][0]),)

    report = per_layer_parity(encoder, example, encoder_fp32_bytes, samples=samples)

    assert _paths(report) == ["self_attn", "norm1", "linear2", "norm2"]
    assert all(row.sqnr_db > 60.0 for row in report.layers)
    assert report.first_jump is None
    reasons = _reasons(report)
    # linear1's output only exists after the functional ReLU fused into its FULLY_CONNECTED.
    assert reasons["linear1"] == "fused"
    assert {p for p, r in reasons.items() if r == "identity"} == {"dropout", "dropout1", "dropout2"}
    # The attention and LayerNorm internals carry module names but are not module outputs.
    assert report.tensors_internal > 20
    assert report.tensors_unmatched == 0
    assert report.match_fraction == pytest.approx(5 / 6)


def test_unmatched_counts_when_the_reference_differs_from_the_exported_model(example, net_fp32_bytes):
    class Renamed(torch.nn.Module):
        """Same computation as Net, but proj is called head: its tensor cannot be matched."""

        def __init__(self, base):
            super().__init__()
            self.stem, self.block, self.head = base.stem, base.block, base.proj
            self.pool, self.fc = base.pool, base.fc

        def forward(self, x):
            x = self.head(self.block(self.stem(x)))
            return self.fc(self.pool(x).flatten(1))

    report = per_layer_parity(Renamed(make_net()), example, net_fp32_bytes)

    assert "head" not in _paths(report)
    assert _reasons(report)["head"] == "no tensor"
    assert report.tensors_unmatched == 1
    assert "Conv2d_proj" in report.unmatched_tensors[0]
    assert to_json_value(report)["tensors_unmatched"] == 1
    # The rest still matches (the root class name differs too: the scope below it is used).
    assert [p for p in _paths(report)] == ["stem.2", "block.act", "block", "pool", "fc"]


@pytest.fixture(scope="module")
def deep_and_example():
    from layer_models import make_deep

    torch.manual_seed(4)
    return make_deep(), (torch.randn(*INPUT_SHAPE),)


DEEP_COMPARED = [
    "features.0.1",
    "features.1.1",
    "features.1.2",
    "features.2",
    "layers.0.0",
    "layers.0.1",
    "layers.1.0",
    "layers.1.1",
    # head.0 (the Flatten) is not compared: permute_fully_connected_weights_pass flattens the NHWC map
    # as it lies and permutes the Linear's columns instead, so that tensor's order is not PyTorch's
    "head.1",
    "head.2",
]


def test_nested_sequentials_and_module_list_fp32(deep_and_example):
    deep, example = deep_and_example
    model_bytes = convert_module(deep, example)

    report = per_layer_parity(deep, example, model_bytes)

    assert _paths(report) == DEEP_COMPARED
    assert all(row.sqnr_db > 60.0 for row in report.layers)
    rows = {row.module_path: row for row in report.layers}
    # The BN folded into the depthwise conv: the tensor is the BN's output, the conv is fused.
    assert rows["features.1.1"].opcode == "DEPTHWISE_CONV_2D"
    assert rows["features.1.1"].fused_modules == ("features.1.0",)
    assert rows["features.2"].also_outputs_of == ("features",)
    assert rows["head.2"].also_outputs_of == ("head", "<model>")
    assert report.modules_total == 20  # the ModuleList itself is never called
    assert report.match_fraction == pytest.approx(17 / 20)  # the Flatten (head.0) is not compared: see DEEP_COMPARED


def test_pt2e_folded_batch_norm_is_compared_after_the_fold(deep_and_example):
    deep, example = deep_and_example
    model_bytes = pt2e_int8(deep, example, samples_for(INPUT_SHAPE, 8, seed=8))

    report = per_layer_parity(deep, example, model_bytes, samples=samples_for(INPUT_SHAPE, 2, seed=9))

    # PT2E drops the BN node before conversion, so no tensor names it; the depthwise conv's tensor
    # holds the BN's output and is compared with it (comparing it with the conv would fail).
    assert _paths(report) == DEEP_COMPARED
    bn_row = report.layers[1]
    assert bn_row.module_path == "features.1.1" and bn_row.fused_modules == ("features.1.0",)
    assert all(row.sqnr_db > 25.0 for row in report.layers), _sqnrs(report)
    assert report.first_jump is None


class LinearBottleneck(torch.nn.Module):
    """MobileNetV2's inverted residual: the Sequential ends with the 1x1 projection's conv + BN and
    no activation, so the Sequential (and, without the residual, the block) returns the BN's output."""

    def __init__(self, ch: int, hidden: int, residual: bool) -> None:
        super().__init__()
        self.residual = residual
        self.block = torch.nn.Sequential(
            torch.nn.Conv2d(ch, hidden, 1, bias=False), torch.nn.BatchNorm2d(hidden), torch.nn.ReLU6(),
            torch.nn.Conv2d(hidden, ch, 1, bias=False), torch.nn.BatchNorm2d(ch),
        )

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


@pytest.fixture(scope="module")
def bottleneck_and_example():
    torch.manual_seed(8)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        LinearBottleneck(8, 16, residual=True),
        LinearBottleneck(8, 16, residual=False),
        torch.nn.Conv2d(8, 4, 1),
    ).eval()
    with torch.no_grad():  # BNs far from identity: the conv's output is nothing like the BN's
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1.0, 1.0)
                m.running_var.uniform_(0.3, 3.0)
                m.weight.uniform_(0.5, 2.0)
                m.bias.uniform_(-1.0, 1.0)
    return model, (torch.randn(*INPUT_SHAPE),)


@pytest.mark.parametrize("mode, min_db", [("fp32", 60.0), ("pt2e", 25.0)])
def test_batch_norm_ending_a_sequential_without_activation_is_compared_after_the_fold(
    bottleneck_and_example, mode, min_db
):
    model, example = bottleneck_and_example
    if mode == "fp32":
        model_bytes = convert_module(model, example)
    else:
        model_bytes = pt2e_int8(model, example, samples_for(INPUT_SHAPE, 8, seed=18))

    report = per_layer_parity(model, example, model_bytes, samples=samples_for(INPUT_SHAPE, 2, seed=19))

    # The projection's tensor holds the BN's output (folded by the converter, or by PT2E before
    # naming); the Sequential returns that same tensor, which must not make the conv, whose output
    # comes before the BN, the row's reference.
    rows = {row.module_path: row for row in report.layers}
    for i, parents in ((1, ("1.block",)), (2, ("2.block", "2"))):
        assert f"{i}.block.4" in rows, _sqnrs(report)
        row = rows[f"{i}.block.4"]
        assert row.module_type == "BatchNorm2d"
        assert row.fused_modules == (f"{i}.block.3",)
        assert row.also_outputs_of == parents
        assert f"{i}.block.3" not in rows
        assert _reasons(report)[f"{i}.block.3"] == "fused"
    assert all(row.sqnr_db > min_db for row in report.layers), _sqnrs(report)
    assert report.first_jump is None


@pytest.mark.parametrize("mode, min_db", [("fp32", 60.0), ("pt2e", 25.0)])
def test_batch_norm_producing_the_model_output_is_compared_after_the_fold(bottleneck_and_example, mode, min_db):
    # The projection conv + BN is the model's last layer: the BN owns the output row, and under
    # PT2E the conv's int8 tensor before the output DEQUANTIZE (already the BN's folded value)
    # must not become a row of its own compared with the conv's pre-BN output.
    bottleneck, example = bottleneck_and_example
    model = torch.nn.Sequential(bottleneck[0], bottleneck[1].block).eval()
    if mode == "fp32":
        model_bytes = convert_module(model, example)
    else:
        model_bytes = pt2e_int8(model, example, samples_for(INPUT_SHAPE, 8, seed=20))

    report = per_layer_parity(model, example, model_bytes, samples=samples_for(INPUT_SHAPE, 2, seed=21))

    rows = {row.module_path: row for row in report.layers}
    assert "1.4" in rows and rows["1.4"].module_type == "BatchNorm2d", _sqnrs(report)
    assert "1.3" not in rows and _reasons(report)["1.3"] == "fused", _sqnrs(report)
    assert all(row.sqnr_db > min_db for row in report.layers), _sqnrs(report)
    assert report.first_jump is None


def test_exported_program_module_is_read_from_its_graph_nodes(net, example, net_fp32_bytes):
    # ExportedProgram.module() inlines every submodule, so hooks see nothing; the nodes'
    # nn_module_stack gives the same names litert-torch writes.
    graph_module = torch.export.export(net, example).module()

    samples = samples_for(INPUT_SHAPE, 2, seed=16)
    report = per_layer_parity(graph_module, example, net_fp32_bytes, samples=samples)

    assert _paths(report) == CNN_COMPARED
    assert all(row.sqnr_db > 60.0 for row in report.layers)
    assert {m.module_path for m in report.unmatched_modules} == CNN_FUSED
    assert report.tensors_unmatched == 0


class ConvLayer(torch.nn.Module):
    """Conv + BN + ReLU6 as one module, like Hugging Face's MobileNetV2ConvLayer."""

    def __init__(self, cin: int, cout: int, groups: int = 1) -> None:
        super().__init__()
        self.convolution = torch.nn.Conv2d(cin, cout, 3, padding=1, groups=groups, bias=False)
        self.normalization = torch.nn.BatchNorm2d(cout, eps=1e-3)
        self.activation = torch.nn.ReLU6()

    def forward(self, x):
        return self.activation(self.normalization(self.convolution(x)))


def test_names_carried_by_shared_constants_do_not_move_a_layer():
    # The converter deduplicates the BN epsilon and the ReLU6 bounds, so every later CONV_2D's name
    # also carries layer 0's BN and ReLU6: layer 0 must still be matched to its own op.
    torch.manual_seed(6)
    layers = [ConvLayer(3, 8), ConvLayer(8, 8, 8), ConvLayer(8, 8), ConvLayer(8, 8, 8)]
    model = torch.nn.Sequential(*layers).eval()
    example = (torch.randn(*INPUT_SHAPE),)
    model_bytes = convert_module(model, example)
    fm = read_flatbuffer(model_bytes)
    later_names = [fm.tensors[op.outputs[0]].name for op in fm.operators if op.opcode.endswith("CONV_2D")][1:]
    assert all("ConvLayer_0/torch.nn.modules.activation.ReLU6_activation" in n for n in later_names)

    report = per_layer_parity(model, example, model_bytes)

    assert _paths(report) == ["0.activation", "1.activation", "2.activation", "3.activation"]
    assert [row.also_outputs_of[0] for row in report.layers] == ["0", "1", "2", "3"]
    assert all(row.sqnr_db > 60.0 for row in report.layers)
    assert {m.reason for m in report.unmatched_modules} == {"fused"}
    assert report.layers[0].fused_modules == ("0.convolution", "0.normalization")


def test_int8_transformer_encoder_layer_mixed_precision(encoder):
    rng = np.random.default_rng(17)
    calibration = [(rng.standard_normal((1, 5, 16)).astype(np.float32),) for _ in range(8)]
    example = (torch.from_numpy(calibration[0][0]),)
    model_bytes = pt2e_int8(encoder, example, calibration)
    assert read_flatbuffer(model_bytes).op_counts.get("DEQUANTIZE", 0) > 0  # LayerNorm stays float

    report = per_layer_parity(encoder, example, model_bytes, samples=calibration[:3])

    assert _paths(report) == ["self_attn", "norm1", "linear2", "norm2"]
    assert all(20.0 < row.sqnr_db < 60.0 for row in report.layers), _sqnrs(report)
    assert report.first_jump is None


class BasicBlock(torch.nn.Module):
    """torchvision's ResNet block: one in-place ReLU used twice, an in-place residual add."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(ch)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(ch)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


def test_in_place_ops_and_a_module_used_twice_do_not_fake_a_jump():
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), BasicBlock(8), BasicBlock(8)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.bias.uniform_(-0.3, 0.3)
    example = (torch.randn(*INPUT_SHAPE),)
    model_bytes = convert_module(model, example)

    report = per_layer_parity(model, example, model_bytes)

    assert all(row.sqnr_db > 60.0 for row in report.layers), _sqnrs(report)
    assert report.first_jump is None
    rows = {row.module_path: row for row in report.layers}
    # bn2 (folded into conv2) is compared before the in-place add changed its output tensor.
    assert rows["1.bn2"].fused_modules == ("1.conv2",)
    # The shared ReLU's last call is the block's output (its first call left no tensor of its own).
    assert rows["1.relu"].also_outputs_of == ("1",)
    assert "identity" not in {m.reason for m in report.unmatched_modules}  # in-place is not a no-op


def test_reference_class_named_differently_from_the_wrapped_export(net, example, net_channels_last_bytes):
    # validate may load the reference from another file than the export did: the root class name
    # in the tensor names ("layer_models.Net_wrapped" under the channels-last wrapper) then differs.
    from layer_models import Net

    class Reloaded(Net):
        pass

    reference = Reloaded().eval()
    reference.load_state_dict(net.state_dict())

    report = per_layer_parity(reference, example, net_channels_last_bytes, channels_last_inputs=(0,))

    assert _paths(report) == CNN_COMPARED
    assert all(row.sqnr_db > 60.0 for row in report.layers)
