"""edge_export.graph.provenance against one table of tensor names taken from real litert-torch conversions
(tests' SmallCNN fp32 / int8 through both backends / channels-last I/O, a nested ModuleList model
under PT2E, a TransformerEncoderLayer), so the quantization report, the Edge TPU report, per-layer
parity and diagnosis all read names the same way."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edge_export.graph.provenance import ModuleRef, clean_module_path, node_module, node_user_source, tensor_module, tensor_scopes
from edge_export.quantization import module_path_for
from edge_export.targets.edgetpu.checks import module_path_from_tensor_name

CNN = "model_zoo.SmallCNN"
SEQ = f"{CNN}/torch.nn.modules.container.Sequential_features"
WRAP = "litert_torch._convert.to_channel_last_io.ChannelLastIOWrapper/model_zoo.SmallCNN_wrapped"
NESTED = "__main__.Nested"
ATTN = "__main__.Attn/torch.nn.modules.transformer.TransformerEncoderLayer_layer"
TORCH_WRAPPER = "torch.export._trace._non_strict_export.<locals>._tuplify_outputs.<locals>._aot_export_non_strict.<locals>.Wrapper"

# (tensor name, module it names (path, type) or None, number of module locations in the name)
REAL_NAMES = [
    ("serving_default_args_0", None, 0),
    ("serving_default_output_0_output", None, 0),
    ("serving_default_args_0_quantized", None, 0),
    ("arith.constant", None, 0),  # a constant the converter made: no module (was the root for the Edge TPU report)
    ("arith.constant11", None, 0),
    (f"{TORCH_WRAPPER};", None, 0),
    (f"{TORCH_WRAPPER};2", None, 0),
    (f"{CNN}/torch.nn.modules.linear.Linear_head;", ("head", "Linear"), 1),
    (f"{CNN}/torch.nn.modules.linear.Linear_head;1", ("head", "Linear"), 1),
    (f"{CNN}/torch.nn.modules.pooling.AdaptiveAvgPool2d_pool;1", ("pool", "AdaptiveAvgPool2d"), 1),
    (f"{SEQ}/torch.nn.modules.conv.Conv2d_3;", ("features.3", "Conv2d"), 1),
    (  # conv + BN + ReLU fused: the first location is the op's own result
        f"{SEQ}/torch.nn.modules.activation.ReLU_2;;{SEQ}/torch.nn.modules.batchnorm.BatchNorm2d_1;;{SEQ}/torch.nn.modules.conv.Conv2d_0;1",
        ("features.2", "ReLU"),
        3,
    ),
    # channels-last I/O: the wrapper edge-export adds is not part of the user's paths
    (f"{WRAP}/torch.nn.modules.linear.Linear_head;", ("head", "Linear"), 1),
    (
        f"{WRAP}/torch.nn.modules.container.Sequential_features/torch.nn.modules.activation.ReLU_4;;"
        f"{WRAP}/torch.nn.modules.container.Sequential_features/torch.nn.modules.conv.Conv2d_3;1",
        ("features.4", "ReLU"),
        2,
    ),
    (f"{NESTED}/torch.nn.modules.conv.Conv2d_stem;2", ("stem", "Conv2d"), 1),
    (f"{NESTED}/torch.nn.modules.container.Sequential_head/torch.nn.modules.linear.Linear_1;", ("head.1", "Linear"), 1),
    # ModuleList items: litert-torch drops the list's own attribute ("blocks")
    (f"{NESTED}/__main__.Block_1/torch.nn.modules.conv.Conv2d_conv;", ("1.conv", "Conv2d"), 1),
    (f"{NESTED}/__main__.Block_1;;{NESTED}/__main__.Block_0;;{NESTED}/__main__.Block_1;", ("1", "Block"), 2),
    ("__main__.Attn;", ("", "Attn"), 1),  # the root module's own forward()
    (f"{ATTN}/torch.nn.modules.activation.MultiheadAttention_self_attn;17", ("layer.self_attn", "MultiheadAttention"), 1),
    (f"{ATTN}/torch.nn.modules.normalization.LayerNorm_norm2;8", ("layer.norm2", "LayerNorm"), 1),
    (f"{ATTN};;__main__.Attn/torch.nn.modules.linear.Linear_emb;;{ATTN}/torch.nn.modules.activation.MultiheadAttention_self_attn;1", ("layer", "TransformerEncoderLayer"), 3),
]


@pytest.mark.parametrize("name, module, locations", REAL_NAMES)
def test_every_reader_agrees_on_real_names(name, module, locations):
    assert len(tensor_scopes(name)) == locations
    found = tensor_module(name)
    assert (None if found is None else (found.path, found.type_name)) == module
    # the quantization report and the Edge TPU report read the same path
    assert module_path_for(name) == (None if module is None else module[0])
    assert module_path_from_tensor_name(name) == module


def test_scopes_keep_order_and_drop_repeats():
    a, b = f"{SEQ}/torch.nn.modules.activation.ReLU_2", f"{SEQ}/torch.nn.modules.conv.Conv2d_0"
    assert tensor_scopes(f"{a};;{b};;{a};4") == (tuple(a.split("/")), tuple(b.split("/")))
    assert tensor_scopes("") == ()


@pytest.mark.parametrize(
    "raw, clean",
    [("L['self'].layer1[0].conv", "layer1.0.conv"), ("layer1.0.conv", "layer1.0.conv"), ("L['self']", ""), ("blocks[12]", "blocks.12")],
)
def test_clean_module_path(raw, clean):
    assert clean_module_path(raw) == clean


class _Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Inner(), _Inner()])

    def forward(self, x):
        return self.blocks[1](x) * 2  # this line is the source of the mul node


def test_graph_nodes_name_their_module_and_the_users_line():
    ep = torch.export.export(_Outer().eval(), (torch.randn(1, 3, 8, 8),))
    convs = [n for n in ep.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
    assert node_module(convs[0]) == ModuleRef("blocks.1.conv", "Conv2d")
    mul = next(n for n in ep.graph.nodes if n.op == "call_function" and "mul" in str(n.target))
    assert node_module(mul) == ModuleRef("", "_Outer")
    source = node_user_source(mul)
    assert source is not None and source.endswith(f"test_provenance.py:{_Outer.forward.__code__.co_firstlineno + 1}")
    placeholder = next(n for n in ep.graph.nodes if n.op == "placeholder")
    assert node_module(placeholder) is None and node_user_source(placeholder) is None


NET = "__main__.Net"
SEQ = "torch.nn.modules.container.Sequential_stem"


def test_fused_name_splits_into_scopes_in_order():
    name = (
        f"{NET}/{SEQ}/torch.nn.modules.activation.ReLU_2;;"
        f"{NET}/{SEQ}/torch.nn.modules.batchnorm.BatchNorm2d_1;;"
        f"{NET}/{SEQ}/torch.nn.modules.conv.Conv2d_0;2"
    )
    assert tensor_scopes(name) == (
        (NET, SEQ, "torch.nn.modules.activation.ReLU_2"),
        (NET, SEQ, "torch.nn.modules.batchnorm.BatchNorm2d_1"),
        (NET, SEQ, "torch.nn.modules.conv.Conv2d_0"),
    )


def test_counter_and_duplicates_are_dropped():
    layer = "torch.nn.modules.transformer.TransformerEncoderLayer"
    attn = f"{layer}/torch.nn.modules.activation.MultiheadAttention_self_attn"
    assert tensor_scopes(f"{attn};;{attn};;{attn};12") == (tuple(attn.split("/")),)
    assert tensor_scopes(f"{layer}/torch.nn.modules.normalization.LayerNorm_norm2;10") == (
        (layer, "torch.nn.modules.normalization.LayerNorm_norm2"),
    )
    assert tensor_scopes(f"{layer};") == ((layer,),)


def test_names_without_a_module_path_give_no_scope():
    assert tensor_scopes("serving_default_output_0_output") == ()
    assert tensor_scopes("") == ()


# ---- operators of a flatbuffer, and the user's source line (the API every target uses) ----------

CNN_FEATURES = f"{CNN}/torch.nn.modules.container.Sequential_features"
FUSED_CONV = (  # the int8 SmallCNN's first CONV_2D, as litert-torch names its output and bias
    f"{CNN_FEATURES}/torch.nn.modules.activation.ReLU_2;;{CNN_FEATURES}/torch.nn.modules.batchnorm.BatchNorm2d_1;;"
    f"{CNN_FEATURES}/torch.nn.modules.conv.Conv2d_0"
)


def _model(names_and_constness, opcode):
    """One operator over the named tensors: the first is its output, the others its inputs."""
    from edge_export.flatbuffer import FlatbufferModel, OperatorInfo, TensorInfo

    tensors = tuple(TensorInfo(i, name, (1,), (1,), "int8", const, None) for i, (name, const) in enumerate(names_and_constness))
    op = OperatorInfo(0, opcode, tuple(range(1, len(tensors))), (0,), None)
    model = FlatbufferModel(size_bytes=0, num_subgraphs=1, tensors=tensors, operators=(op,), inputs=(1,), outputs=(0,),
                            signatures=(), min_runtime_version=None, description=None, subgraph_operators=((op,),))
    return model, op


@pytest.mark.parametrize(
    "tensors, opcode, module",
    [
        # the output names the op's own module; for a fused conv, the conv among its locations
        ([(f"{FUSED_CONV};2", False), (f"{CNN_FEATURES}/torch.nn.modules.conv.Conv2d_0;", False), (f"{FUSED_CONV};", True)],
         "CONV_2D", ("features.0", "Conv2d")),
        # a classifier's last FULLY_CONNECTED writes the graph output: its weights name the layer,
        # not the pool whose activation it reads
        ([("serving_default_output_0_output_quantized", False), (f"{CNN}/torch.nn.modules.pooling.AdaptiveAvgPool2d_pool;1", False),
          (f"{CNN}/torch.nn.modules.linear.Linear_head;1", True), (f"{CNN}/torch.nn.modules.linear.Linear_head;", True)],
         "FULLY_CONNECTED", ("head", "Linear")),
        # no name of its own and no weights (the DEQUANTIZE to the graph output): the producer's module
        ([("serving_default_output_0_output", False), (f"{CNN}/torch.nn.modules.linear.Linear_head;1", False)], "DEQUANTIZE", ("head", "Linear")),
        ([("serving_default_output_0_output", False), ("serving_default_x", False), ("arith.constant", True)], "TRANSPOSE", None),
    ],
)
def test_flatbuffer_operator_module_reads_output_then_weights_then_inputs(tensors, opcode, module):
    from edge_export.graph.provenance import flatbuffer_operator_module, module_label

    model, op = _model(tensors, opcode)
    found = flatbuffer_operator_module(model, op)
    assert (None if found is None else (found.path, found.type_name)) == module
    assert module_label(found) == (None if module is None else module[0])


def test_module_label_names_the_root_by_its_class():
    from edge_export.graph.provenance import module_label

    assert module_label(ModuleRef("", "Attn")) == "Attn"
    assert module_label(ModuleRef("layer.norm2", "LayerNorm")) == "layer.norm2"
    assert module_label(None) is None


def test_module_user_source_points_at_the_users_class_not_the_librarys():
    from edge_export.graph.provenance import module_user_source

    model = _Outer().eval()
    assert module_user_source(model, "blocks.1") == f"{__file__}:{_Inner.__init__.__code__.co_firstlineno - 1}"
    assert module_user_source(model, "blocks.1.conv") is None  # nn.Conv2d: torch's file says nothing
    assert module_user_source(model, None) is None and module_user_source(None, "blocks.1") is None
    graph = torch.export.export(model, (torch.randn(1, 3, 8, 8),)).module()
    source = module_user_source(graph, "")  # a graph: the line that created the root's first node
    assert source is not None and source.endswith(f"test_provenance.py:{_Outer.forward.__code__.co_firstlineno + 1}")
