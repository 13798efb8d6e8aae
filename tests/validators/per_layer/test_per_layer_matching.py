"""The pure pieces of per-layer parity: each matching rule on hand-built tensors, ops and captured
calls (no export), layouts and the jump rule (tensor names: test_provenance.py)."""

from __future__ import annotations

import numpy as np
import torch

from edge_export.flatbuffer import OperatorInfo, TensorInfo
from edge_export.validators.layers import first_jump_index
from edge_export.validators.per_layer.capture import CapturedCall, CapturedSample
from edge_export.validators.per_layer.layout import apply_layout, layout_candidates
from edge_export.validators.per_layer.matching import (
    MatchState,
    TensorScopes,
    conv_before_a_folded_output_batch_norm_is_fused_into_the_output,
    folded_batch_norm_is_compared_after_the_fold,
    functional_scope_resolves_to_the_nearest_module,
    fused_module_is_listed_on_the_op_it_fused_into,
    graph_output_takes_its_weights_scope,
    innermost_module_owns_the_row,
    layout_op_feeding_a_module_is_an_adapter,
    match_each_module,
    match_layers,
    module_returning_a_matched_tensor_shares_its_row,
    module_returning_a_model_output_takes_the_output_tensor,
    owner_is_last_finished_module,
    read_tensor_scopes,
    repeated_module_is_compared_only_when_each_call_left_tensors,
    scope_below_the_root,
    tensor_names_a_module_that_ran,
    tensors_owned_except_adapters,
)
from edge_export.validators.per_layer.measurement import choose_layouts
from edge_export.validators.per_layer.results import UnmatchedReason


def test_nhwc_to_nchw_is_found_from_shapes():
    cands = layout_candidates((1, 12, 16, 8), (1, 8, 12, 16))
    assert [label for label, _ in cands] == ["NHWC->NCHW"]
    x = np.arange(1 * 12 * 16 * 8, dtype=np.float32).reshape(1, 12, 16, 8)
    np.testing.assert_array_equal(apply_layout(x, cands[0][1], (1, 8, 12, 16)), x.transpose(0, 3, 1, 2))


def test_ambiguous_shapes_list_identity_then_channels_first_first():
    labels = [label for label, _ in layout_candidates((1, 8, 8, 8), (1, 8, 8, 8))]
    assert labels[:2] == ["identity", "NHWC->NCHW"]
    assert len(labels) == 6  # every order of the three non-batch axes fits


def test_size_one_axes_are_ignored_and_other_sizes_refused():
    cands = layout_candidates((5, 16), (1, 5, 16))
    assert [label for label, _ in cands] == ["squeeze+identity"]
    x = np.ones((5, 16), dtype=np.float32)
    assert apply_layout(x, cands[0][1], (1, 5, 16)).shape == (1, 5, 16)
    assert layout_candidates((5, 16), (1, 5, 8)) == []


def test_jump_needs_both_a_drop_and_a_low_value():
    # float noise: big drops at high SQNR are not jumps
    assert first_jump_index([140.0, 110.0, 95.0, 130.0]) is None
    # int8 slowly degrading below the floor without any sharp drop: no single culprit
    assert first_jump_index([38.0, 34.0, 31.0, 28.0, 26.0]) is None
    # a damaged layer
    assert first_jump_index([38.0, 36.0, 4.0, 3.0]) == 2
    # the first layer already broken
    assert first_jump_index([5.0, 5.0]) == 0
    # later drops do not move the culprit
    assert first_jump_index([40.0, 12.0, -3.0]) == 1
    assert first_jump_index([40.0, 25.0], drop_db=20.0) is None
    assert first_jump_index([]) is None


# ---- matching rules, each on a hand-built graph (no export) -----------------------------------
#
# Names follow litert-torch's spelling: "<root class>/<class>_<attribute>/...;". The keys of the
# captured calls are the scope components below the root.

ROOT = "m.Net"
CONV = ("torch.nn.modules.conv.Conv2d_conv",)
BN = ("torch.nn.modules.batchnorm.BatchNorm2d_bn",)
RELU = ("torch.nn.modules.activation.ReLU_act",)
SEQ = ("torch.nn.modules.container.Sequential_stem",)
SEQ_CONV = SEQ + ("torch.nn.modules.conv.Conv2d_0",)
SEQ_RELU = SEQ + ("torch.nn.modules.activation.ReLU_1",)
FC = ("torch.nn.modules.linear.Linear_fc",)


def _name(*keys: tuple[str, ...]) -> str:
    return ";;".join("/".join((ROOT, *k)) for k in keys) + ";"


def _tensor(i: int, name: str, shape=(1, 4, 4, 8), constant: bool = False) -> TensorInfo:
    return TensorInfo(index=i, name=name, shape=shape, shape_signature=shape, dtype="float32", is_constant=constant, quant=None)


def _op(i: int, opcode: str, inputs, outputs) -> OperatorInfo:
    return OperatorInfo(index=i, opcode=opcode, inputs=tuple(inputs), outputs=tuple(outputs), options_type=None)


def _call(key, finished, *, path=None, shape=(1, 8, 4, 4), module_type="Conv2d", out_id=None, in_id=None, identity=False, calls=1):
    path = path if path is not None else ".".join(c.rsplit("_", 1)[1] for c in key)
    return CapturedCall(
        key=key, path=path, module_type=module_type, finished=finished, output=torch.zeros(shape),
        identity=identity, out_id=out_id, in_id=in_id, calls=calls,
    )


def _calls(*calls: CapturedCall) -> dict:
    return {c.key: c for c in calls}


def test_scope_below_the_root_drops_the_root_whatever_its_name():
    known = _calls(_call(CONV, 0))
    assert scope_below_the_root((ROOT, *CONV), ROOT, known) == CONV
    # a wrapper around the model: leading components go until a known module is reached
    assert scope_below_the_root(("m.Wrapper", "m.Net_wrapped", *CONV), ROOT, known) == CONV
    # nothing known: only the first component (the root) is dropped
    assert scope_below_the_root(("m.Other", "m.X_x", "m.Y_y"), ROOT, known) == ("m.X_x", "m.Y_y")


def test_functional_scope_resolves_to_the_nearest_module():
    known = _calls(_call((), 5, path=""), _call(SEQ, 4), _call(SEQ_CONV, 0))
    # a functional op inside the conv's forward belongs to the conv
    assert functional_scope_resolves_to_the_nearest_module((ROOT, *SEQ_CONV, "f.pad_p"), ROOT, known) == SEQ_CONV
    # a module the reference lacks resolves to its parent
    assert functional_scope_resolves_to_the_nearest_module((ROOT, *SEQ, "m.Missing_9"), ROOT, known) == SEQ
    assert functional_scope_resolves_to_the_nearest_module((ROOT, *FC), ROOT, _calls(_call(CONV, 0))) is None


def test_graph_output_takes_its_weights_scope():
    tensors = [
        _tensor(0, _name(CONV), shape=(1, 8)),
        _tensor(1, _name(FC), shape=(10, 8), constant=True),
        _tensor(2, "arith.constant3", shape=(10,), constant=True),
        _tensor(3, "serving_default_output_0", shape=(1, 10)),
    ]
    fc = _op(1, "FULLY_CONNECTED", [0, 1, 2], [3])
    assert graph_output_takes_its_weights_scope(fc, tensors) == [(ROOT, *FC)]
    calls = _calls(_call(CONV, 0), _call(FC, 1, shape=(1, 10)))
    ops = [_op(0, "CONV_2D", [], [0]), fc]
    graph = read_tensor_scopes(tensors, ops, {0: None, 3: None}, [3], ROOT, calls)
    assert graph.scopes[3] == {FC} and graph.named[3]
    # a tensor that is not a graph output keeps only its own name (here none)
    graph = read_tensor_scopes(tensors, ops, {0: None, 3: None}, [], ROOT, calls)
    assert graph.scopes[3] == set() and not graph.named[3]


def test_tensor_names_a_module_that_ran():
    calls = _calls(_call(SEQ, 2), _call(SEQ_CONV, 0))
    assert tensor_names_a_module_that_ran([(ROOT, *SEQ_CONV)], ROOT, calls)
    # the name resolves to the Sequential, but names a child the reference does not have:
    # the tensor is unmatched (from another model), not internal
    missing = (ROOT, *SEQ, "torch.nn.modules.conv.Conv2d_7")
    assert not tensor_names_a_module_that_ran([missing], ROOT, calls)
    assert functional_scope_resolves_to_the_nearest_module(missing, ROOT, calls) == SEQ


def test_module_returning_a_model_output_takes_the_output_tensor():
    fc = _call(FC, 3, shape=(1, 10), out_id=("out",))
    conv = _call(CONV, 1, out_id=("conv",))
    dead = CapturedCall(key=RELU, path="act", module_type="ReLU", finished=2, output=None, out_id=("out",))
    calls = _calls(conv, dead, fc)
    assert module_returning_a_model_output_takes_the_output_tensor(calls, [("out",)], [9], {9: None}) == {FC: 9}
    # an output LiteRT did not compute (not in the computed tensors) maps nothing
    assert module_returning_a_model_output_takes_the_output_tensor(calls, [("out",)], [9], {}) == {}
    # more PyTorch outputs than flatbuffer outputs: the extra ones map nothing
    assert module_returning_a_model_output_takes_the_output_tensor(calls, [("x",), ("out",)], [9], {9: None}) == {}


def test_owner_is_last_finished_module():
    calls = _calls(_call(CONV, 0), _call(BN, 1), _call(RELU, 2))
    # a CONV_2D named after the conv, its BN and its ReLU holds the ReLU's output
    assert owner_is_last_finished_module({CONV, BN, RELU}, calls) == RELU
    # a BN epsilon shared by a later conv does not make the (earlier) BN the owner
    assert owner_is_last_finished_module({BN, CONV}, _calls(_call(BN, 0), _call(CONV, 5))) == CONV
    assert owner_is_last_finished_module(set(), calls) is None


def test_layout_op_feeding_a_module_is_an_adapter():
    scopes = {0: set(), 1: {CONV}, 2: {CONV}}
    transpose_in = _op(0, "TRANSPOSE", [0, 5], [1])  # input 0 carries nothing of the conv
    assert layout_op_feeding_a_module_is_an_adapter(transpose_in, CONV, scopes)
    transpose_out = _op(1, "TRANSPOSE", [1, 5], [2])  # transposes the conv's own result
    assert not layout_op_feeding_a_module_is_an_adapter(transpose_out, CONV, scopes)
    conv = _op(2, "CONV_2D", [0, 6, 7], [1])
    assert not layout_op_feeding_a_module_is_an_adapter(conv, CONV, scopes)


def test_tensors_owned_except_adapters():
    adapters = {10}

    def is_adapter(t, key):
        return t in adapters

    # the conv owns its TRANSPOSE adapter (10) and its CONV_2D (11): the adapter is left out
    assert tensors_owned_except_adapters(CONV, [10, 11], {10: CONV, 11: CONV}, is_adapter) == [11]
    # a Flatten is only its RESHAPE: it keeps it
    assert tensors_owned_except_adapters(CONV, [10], {10: CONV}, is_adapter) == [10]
    # owns only its adapter while the ReLU owns the CONV_2D: the conv was fused into the ReLU
    assert tensors_owned_except_adapters(CONV, [10, 11], {10: CONV, 11: RELU}, is_adapter) == []
    # a descendant's tensor counts as the parent's
    assert tensors_owned_except_adapters(SEQ, [12], {12: SEQ_RELU}, is_adapter) == [12]


def test_fused_module_is_listed_on_the_op_it_fused_into():
    producer = {0: _op(0, "TRANSPOSE", [], [0]), 1: _op(1, "CONV_2D", [], [1]), 2: _op(2, "RESHAPE", [], [2])}
    assert fused_module_is_listed_on_the_op_it_fused_into([0, 1, 2], producer) == 1
    assert fused_module_is_listed_on_the_op_it_fused_into([0, 2], producer) == 2


def test_repeated_module_is_compared_only_when_each_call_left_tensors():
    order = [0, 1, 2, 3, 4]
    assert repeated_module_is_compared_only_when_each_call_left_tensors(1, order, [2])
    assert repeated_module_is_compared_only_when_each_call_left_tensors(2, order, [1, 3])  # two stretches
    assert not repeated_module_is_compared_only_when_each_call_left_tensors(2, order, [3])  # one call fused away
    assert not repeated_module_is_compared_only_when_each_call_left_tensors(2, order, [1, 2])


def _graph(tensors, ops, calls, computed=None, outputs=()) -> TensorScopes:
    computed = computed if computed is not None else {t.index: None for t in tensors if not t.is_constant}
    return read_tensor_scopes(tensors, ops, computed, list(outputs), ROOT, calls)


def test_match_each_module_applies_the_rules_in_order():
    # Sequential(conv, relu) fused into one CONV_2D; a Dropout; a BN named nowhere; a conv whose
    # tensor has another size; a fully connected layer whose output is the model's.
    odd = ("torch.nn.modules.conv.Conv2d_odd",)
    drop = ("torch.nn.modules.dropout.Dropout_drop",)
    calls = _calls(
        _call(SEQ_CONV, 0),
        _call(SEQ_RELU, 1, module_type="ReLU"),
        _call(SEQ, 2, module_type="Sequential"),
        _call(drop, 3, module_type="Dropout", identity=True),
        _call(BN, 4, module_type="BatchNorm2d"),
        _call(odd, 5, shape=(1, 3, 4, 4)),
        _call(FC, 6, shape=(1, 10), module_type="Linear"),
    )
    tensors = [
        _tensor(0, "serving_default_args_0"),
        _tensor(1, _name(SEQ_RELU, SEQ_CONV)),
        _tensor(2, _name(odd)),
        _tensor(3, "serving_default_output_0", shape=(1, 10)),
    ]
    ops = [_op(0, "CONV_2D", [0], [1]), _op(1, "CONV_2D", [1], [2]), _op(2, "FULLY_CONNECTED", [2], [3])]
    graph = _graph(tensors, ops, calls)
    in_order = sorted(calls.items(), key=lambda kv: kv[1].finished)
    state = match_each_module(in_order, set(), {FC: 3}, graph, tensors)
    assert state.assignment == {SEQ_RELU: 1, SEQ: 1, FC: 3}
    reasons = {k: m.reason for k, m in state.unmatched.items()}
    assert reasons == {
        SEQ_CONV: UnmatchedReason.FUSED,
        drop: UnmatchedReason.IDENTITY,
        BN: UnmatchedReason.NO_TENSOR,
        odd: UnmatchedReason.SHAPE_MISMATCH,
    }
    assert state.unmatched[SEQ_CONV].fused_into == tensors[1].name and state.fused_into == {1: ["stem.0"]}
    # an ambiguous key is left out before anything else is tried
    state = match_each_module(in_order, {SEQ_RELU}, {FC: 3}, graph, tensors)
    assert state.unmatched[SEQ_RELU].reason == UnmatchedReason.AMBIGUOUS_NAME


def test_folded_batch_norm_is_compared_after_the_fold():
    conv = _call(CONV, 0, out_id=("c",))
    bn = _call(BN, 1, module_type="BatchNorm2d", in_id=("c",), out_id=("b",))
    tensors = [_tensor(0, "in"), _tensor(1, _name(CONV))]
    in_order = [(CONV, conv), (BN, bn)]

    def state():
        s = MatchState(assignment={CONV: 1})
        s.leave_out(bn, UnmatchedReason.NO_TENSOR)
        return s

    folded = state()
    folded_batch_norm_is_compared_after_the_fold(folded, in_order, tensors, graph_outputs=[])
    # the conv's tensor holds the BN's output (PT2E folded the BN into the conv's weights)
    assert folded.assignment == {BN: 1}
    assert folded.unmatched[CONV].reason == UnmatchedReason.FUSED and folded.fused_into == {1: ["conv"]}
    # not when the tensor is a model output (conv_before_a_folded_output_... handles that)
    kept = state()
    folded_batch_norm_is_compared_after_the_fold(kept, in_order, tensors, graph_outputs=[1])
    assert kept.assignment == {CONV: 1} and kept.unmatched[BN].reason == UnmatchedReason.NO_TENSOR


def test_conv_before_a_folded_output_batch_norm_is_fused_into_the_output():
    conv = _call(CONV, 0, out_id=("c",))
    bn = _call(BN, 1, module_type="BatchNorm2d", in_id=("c",), out_id=("b",))
    calls = _calls(conv, bn)
    in_order = [(CONV, conv), (BN, bn)]
    tensors = [
        _tensor(0, "serving_default_args_0"),
        _tensor(1, _name(CONV)),
        _tensor(2, "serving_default_output_0"),
    ]
    ops = [_op(0, "CONV_2D", [0], [1]), _op(1, "DEQUANTIZE", [1], [2])]
    graph = _graph(tensors, ops, calls)
    s = MatchState(assignment={CONV: 1, BN: 2})
    conv_before_a_folded_output_batch_norm_is_fused_into_the_output(s, in_order, {BN: 2}, graph, tensors)
    assert s.assignment == {BN: 2} and s.fused_into == {2: ["conv"]}
    # a BN that names a tensor of its own was not folded: nothing changes
    tensors[1] = _tensor(1, _name(BN, CONV))
    graph = _graph(tensors, ops, calls)
    s = MatchState(assignment={CONV: 1, BN: 2})
    conv_before_a_folded_output_batch_norm_is_fused_into_the_output(s, in_order, {BN: 2}, graph, tensors)
    assert s.assignment == {CONV: 1, BN: 2} and not s.unmatched


def test_module_returning_a_matched_tensor_shares_its_row():
    relu = _call(SEQ_RELU, 1, module_type="ReLU", out_id=("r",))
    seq = _call(SEQ, 2, module_type="Sequential", out_id=("r",))
    drop = _call(RELU, 3, module_type="Dropout", out_id=("r",), identity=True)
    s = MatchState(assignment={SEQ_RELU: 4})
    s.fuse(seq, 4, [_tensor(i, f"t{i}") for i in range(5)])
    s.leave_out(drop, UnmatchedReason.IDENTITY)
    module_returning_a_matched_tensor_shares_its_row(s, [(SEQ_RELU, relu), (SEQ, seq), (RELU, drop)])
    assert s.assignment == {SEQ_RELU: 4, SEQ: 4}
    assert s.fused_into == {4: []}  # no longer listed as fused
    assert list(s.unmatched) == [RELU]  # identity modules stay out


def test_innermost_module_owns_the_row():
    calls = _calls(_call(SEQ_CONV, 0), _call(SEQ_RELU, 1), _call(SEQ, 2), _call(FC, 3))
    rows = innermost_module_owns_the_row({SEQ: 5, FC: 7, SEQ_RELU: 5}, calls, {7: 0, 5: 1})
    assert rows == {7: (FC,), 5: (SEQ_RELU, SEQ)}
    assert list(rows) == [7, 5]  # flatbuffer order


def test_match_layers_end_to_end_on_a_hand_built_graph():
    conv = _call(SEQ_CONV, 0, out_id=("c",))
    relu = _call(SEQ_RELU, 1, module_type="ReLU", in_id=("c",), out_id=("r",))
    seq = _call(SEQ, 2, module_type="Sequential", out_id=("r",))
    root = _call((), 3, path="", module_type="Net", out_id=("r",))
    tensors = [
        _tensor(0, "serving_default_args_0"),
        _tensor(1, _name(SEQ_CONV)),  # the converter's TRANSPOSE into NHWC, named after the conv
        _tensor(2, _name(SEQ_RELU, SEQ_CONV)),
        _tensor(3, "t3", shape=(1, 8, 4, 4)),
        _tensor(4, "serving_default_output_0", shape=(1, 8, 4, 4)),
    ]
    ops = [
        _op(0, "TRANSPOSE", [0], [1]),
        _op(1, "CONV_2D", [1], [2]),
        _op(2, "TRANSPOSE", [2], [3]),
        _op(3, "DEQUANTIZE", [3], [4]),
    ]
    computed = {t: np.zeros(tensors[t].shape, np.float32) for t in (1, 2, 3, 4)}
    sample = CapturedSample(_calls(conv, relu, seq, root), [torch.zeros(1)], set(), computed)
    match = match_layers(tensors, ops, sample, ROOT, graph_outputs=[4])
    # the CONV_2D holds the ReLU's output, shared by the Sequential and the model; the leading
    # TRANSPOSE is the conv's adapter, so the conv itself was fused into the CONV_2D
    assert match.rows == {2: (SEQ_RELU, SEQ, ())}
    assert [(m.module_path, m.reason) for m in match.unmatched_modules] == [("stem.0", UnmatchedReason.FUSED)]
    assert match.fused_into == {2: ["stem.0"]}
    assert match.graph.order == [1, 2, 3, 4]


def test_layouts_follow_the_unambiguous_tensors_of_the_same_rank():
    # tensor 1 can only be NHWC->NCHW; tensor 2 (C == H == W) could be any order: it follows 1
    calls = _calls(_call(CONV, 0, shape=(1, 8, 4, 6)), _call(RELU, 1, shape=(1, 4, 4, 4)))
    tensors = [_tensor(0, "x"), _tensor(1, "a", shape=(1, 4, 6, 8)), _tensor(2, "b", shape=(1, 4, 4, 4))]
    values = {1: np.ones((1, 4, 6, 8), np.float32), 2: np.ones((1, 4, 4, 4), np.float32)}
    layouts = choose_layouts(tensors, calls, {1: (CONV,), 2: (RELU,)}, values)
    assert layouts[1][0] == "NHWC->NCHW" and layouts[2][0] == "NHWC->NCHW"
    # alone, the tie goes to the more likely candidate (identity) when cosines are equal
    alone = choose_layouts(tensors, calls, {2: (RELU,)}, values)
    assert alone[2][0] == "identity"
