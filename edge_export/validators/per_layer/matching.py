"""Matching: which flatbuffer tensor holds which PyTorch module's output.

litert-torch names each flatbuffer tensor after the ``nn_module_stack`` of the FX node(s) it came
from: one *scope* per module on the call stack, ``<class fullname>_<attribute name>`` joined with
``/`` (the root has no attribute name), the whole followed by ``;``. When the converter fuses ops
(conv + batch norm + ReLU, bias add + residual add) the scopes of all fused nodes are joined with
``;`` and a counter is appended to keep names unique, e.g.::

    __main__.Net/torch.nn.modules.container.Sequential_stem/torch.nn.modules.activation.ReLU_2;;
    __main__.Net/torch.nn.modules.container.Sequential_stem/torch.nn.modules.conv.Conv2d_0;2

(``edge_export.graph.provenance.tensor_scopes`` reads them.) Capture gives each PyTorch module call the
same scope key. Each rule below is one function, applied by ``match_layers`` in this order:

1. ``scope_below_the_root`` / ``functional_scope_resolves_to_the_nearest_module``: a name's scopes
   become keys of modules that ran; ``graph_output_takes_its_weights_scope``: the model's outputs
   (renamed ``serving_default_output_N``) take the scopes of their op's weights;
   ``tensor_names_a_module_that_ran`` tells *internal* tensors from *unmatched* ones.
2. ``module_returning_a_model_output_takes_the_output_tensor``.
3. ``owner_is_last_finished_module``: each tensor is owned by the module, among those its name
   carries, that finished last in PyTorch.
4. ``match_each_module``: a module M's output is the *last* tensor (in flatbuffer order) owned by
   M or a descendant (``tensors_owned_except_adapters``, leaving out
   ``layout_op_feeding_a_module_is_an_adapter``); a module that owns none is *fused*
   (``fused_module_is_listed_on_the_op_it_fused_into``); Dropout-like modules are *identity*; a
   module called several times is compared only when
   ``repeated_module_is_compared_only_when_each_call_left_tensors``; a tensor no transpose brings
   to the PyTorch shape is a *shape mismatch*.
5. ``folded_batch_norm_is_compared_after_the_fold`` and
   ``conv_before_a_folded_output_batch_norm_is_fused_into_the_output`` (PT2E folds BatchNorm into
   the conv's weights and drops its node).
6. ``module_returning_a_matched_tensor_shares_its_row`` (a Sequential and its last child).
7. ``innermost_module_owns_the_row``: one row per tensor; enclosing modules are ``also_outputs_of``.

Flatbuffer tensors that carry a module's name but are not its output (LayerNorm's inner ops) are
*internal*; tensors whose names match no module of the given PyTorch model are *unmatched*.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...flatbuffer import OperatorInfo, TensorInfo
from ...graph.provenance import tensor_scopes
from .capture import CapturedCall, CapturedSample, ModuleKey, tensor_identity
from .layout import layout_candidates
from .results import UnmatchedModule, UnmatchedReason

__all__ = [
    "DATA_MOVEMENT_OPS",
    "LayerMatch",
    "MatchState",
    "TensorScopes",
    "conv_before_a_folded_output_batch_norm_is_fused_into_the_output",
    "folded_batch_norm_is_compared_after_the_fold",
    "functional_scope_resolves_to_the_nearest_module",
    "fused_module_is_listed_on_the_op_it_fused_into",
    "graph_output_takes_its_weights_scope",
    "innermost_module_owns_the_row",
    "layout_op_feeding_a_module_is_an_adapter",
    "match_each_module",
    "match_layers",
    "module_returning_a_matched_tensor_shares_its_row",
    "module_returning_a_model_output_takes_the_output_tensor",
    "owner_is_last_finished_module",
    "read_tensor_scopes",
    "repeated_module_is_compared_only_when_each_call_left_tensors",
    "scope_below_the_root",
    "tensor_names_a_module_that_ran",
    "tensors_owned_except_adapters",
]

DATA_MOVEMENT_OPS = frozenset(
    {"TRANSPOSE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "QUANTIZE", "DEQUANTIZE", "CAST", "SLICE",
     "STRIDED_SLICE", "GATHER", "PAD", "PADV2", "CONCATENATION", "SPLIT", "PACK", "UNPACK"}
)

Calls = Mapping[ModuleKey, CapturedCall]


# ---- the flatbuffer side, as matching sees it ---------------------------------------------------


@dataclass(frozen=True)
class TensorScopes:
    """The computed flatbuffer tensors in execution order, with their producer op and the keys of
    the modules (that ran) their names carry."""

    order: list[int]
    producer: dict[int, OperatorInfo]
    scopes: dict[int, set[ModuleKey]]
    named: dict[int, bool]  # names a module of the given model (else the tensor is unmatched)

    @property
    def position(self) -> dict[int, int]:
        return {t: n for n, t in enumerate(self.order)}


def is_under(key: ModuleKey, parent: ModuleKey) -> bool:
    return key[: len(parent)] == parent


def scope_below_the_root(scope: tuple[str, ...], root_name: str, known: Calls) -> ModuleKey:
    """The scope's components below the user's root module.

    The root is found by name; when its name differs (a wrapper, a PT2E graph module, a class
    loaded from another file), as many leading components are dropped as it takes to land on a
    known module (one, failing that).
    """
    for i, comp in enumerate(scope):
        if comp == root_name or comp.startswith(root_name + "_"):
            return scope[i + 1 :]
    for i in range(1, len(scope)):
        if scope[i:] in known:
            return scope[i:]
    return scope[1:]


def functional_scope_resolves_to_the_nearest_module(
    scope: tuple[str, ...], root_name: str, known: Calls
) -> ModuleKey | None:
    """The nearest module that ran for a flatbuffer scope: a scope deeper than any hooked module
    (a functional call inside a module's forward) belongs to its innermost enclosing module."""
    key = scope_below_the_root(scope, root_name, known)
    while True:
        if key in known:
            return key
        if not key:
            return None
        key = key[:-1]


def graph_output_takes_its_weights_scope(op: OperatorInfo, tensors: Sequence[TensorInfo]) -> list[tuple[str, ...]]:
    """Scopes for a model output whose name carries none: the converter renames outputs
    ``serving_default_output_N``, but the weights of the op that computes it keep the scope."""
    found: list[tuple[str, ...]] = []
    for i in op.inputs:
        if i >= 0 and tensors[i].is_constant:
            found += tensor_scopes(tensors[i].name)
    return found


def tensor_names_a_module_that_ran(found: Sequence[tuple[str, ...]], root_name: str, calls: Calls) -> bool:
    """Whether a tensor's scopes name a module of the given model exactly: a name that only
    resolves to an ancestor names a module the PyTorch model lacks (the tensor is *unmatched*,
    not *internal*)."""
    return any(scope_below_the_root(s, root_name, calls) in calls for s in found)


def read_tensor_scopes(
    tensors: Sequence[TensorInfo],
    operators: Sequence[OperatorInfo],
    computed: Mapping[int, Any],
    graph_outputs: Sequence[int],
    root_name: str,
    calls: Calls,
) -> TensorScopes:
    """Producer op and module keys of every computed tensor (those in ``computed``), in order."""
    producer: dict[int, OperatorInfo] = {}
    order: list[int] = []
    scopes: dict[int, set[ModuleKey]] = {}
    named: dict[int, bool] = {}
    for op in operators:
        for t in op.outputs:
            if t < 0 or t not in computed:
                continue
            producer[t] = op
            order.append(t)
            found = list(tensor_scopes(tensors[t].name))
            if not found and t in graph_outputs:
                found += graph_output_takes_its_weights_scope(op, tensors)
            resolved = (functional_scope_resolves_to_the_nearest_module(s, root_name, calls) for s in found)
            scopes[t] = {k for k in resolved if k is not None}
            named[t] = tensor_names_a_module_that_ran(found, root_name, calls)
    return TensorScopes(order, producer, scopes, named)


# ---- the rules --------------------------------------------------------------------------------


def module_returning_a_model_output_takes_the_output_tensor(
    calls: Calls, output_ids: Sequence[tuple | None], graph_outputs: Sequence[int], computed: Any
) -> dict[ModuleKey, int]:
    """Modules whose output is literally one of the model's outputs (``output_ids``: the
    ``tensor_identity`` of each, in forward()'s result order) map to that output tensor, whatever
    the names say: the converter renames outputs, and their last op may carry another scope."""
    by_output: dict[ModuleKey, int] = {}
    for c in calls.values():
        if c.output is None:
            continue
        for o_idx, out_id in enumerate(output_ids):
            matches = o_idx < len(graph_outputs) and c.out_id is not None and c.out_id == out_id
            if matches and graph_outputs[o_idx] in computed:
                by_output[c.key] = graph_outputs[o_idx]
    return by_output


def owner_is_last_finished_module(keys: set[ModuleKey], calls: Calls) -> ModuleKey | None:
    """The module a tensor holds the value of: among those its name carries, the one that
    finished last in PyTorch (the ReLU a conv and BN were fused into, the parent whose residual add
    absorbed a Linear's reshape). Names of earlier modules also ride along on constants the
    converter deduplicates (BN epsilons, ReLU6 bounds), which never makes them the owner."""
    return max(keys, key=lambda k: calls[k].finished) if keys else None


def layout_op_feeding_a_module_is_an_adapter(
    op: OperatorInfo, key: ModuleKey, scopes: Mapping[int, set[ModuleKey]]
) -> bool:
    """Whether a tensor named after module ``key`` is only a layout op feeding it: the TRANSPOSE
    the converter puts before a conv carries the conv's name but holds its input. Such an op's
    own inputs carry nothing of the module."""
    if op.opcode not in DATA_MOVEMENT_OPS:
        return False
    return not any(i in scopes and any(is_under(s, key) for s in scopes[i]) for i in op.inputs)


def tensors_owned_except_adapters(
    key: ModuleKey, carrying: list[int], owner: Mapping[int, ModuleKey | None], is_adapter: Any
) -> list[int]:
    """The tensors that can hold module ``key``'s output, in order (the last one is its output).

    Of the tensors carrying its name (``carrying``), those it or a descendant owns, leaving out
    the adapters that feed it (``is_adapter(t, key)``), unless the module is nothing but layout
    ops (a Flatten is only its RESHAPE). A module that owns only adapters while later modules own
    its other tensors owns nothing: it was fused into them.
    """
    owned = [t for t in carrying if owner[t] is not None and is_under(owner[t], key)]
    real = [t for t in owned if not is_adapter(t, key)]
    if real or len(owned) == len(carrying):
        return real or owned
    return []


def fused_module_is_listed_on_the_op_it_fused_into(carrying: list[int], producer: Mapping[int, OperatorInfo]) -> int:
    """The tensor a fused module (a conv fused into its ReLU) is listed on: the first op carrying
    its name that computes something, else the last tensor carrying it."""
    return next((t for t in carrying if producer[t].opcode not in DATA_MOVEMENT_OPS), carrying[-1])


def count_runs(order: Sequence[int], members: set[int]) -> int:
    """How many separate stretches of ``order`` consist of ``members``."""
    runs, inside = 0, False
    for t in order:
        if t in members and not inside:
            runs += 1
        inside = t in members
    return runs


def repeated_module_is_compared_only_when_each_call_left_tensors(
    n_calls: int, order: Sequence[int], owned: list[int]
) -> bool:
    """Whether a module's last call can be told apart. A module used several times (torchvision's
    shared ReLU) has one name for all its calls; only when each call left its own stretch of
    tensors is the last stretch the last call's."""
    return n_calls <= 1 or count_runs(order, set(owned)) == n_calls


@dataclass
class MatchState:
    """The match as the rules build it: module key -> tensor, modules left out, fused paths."""

    assignment: dict[ModuleKey, int] = field(default_factory=dict)
    unmatched: dict[ModuleKey, UnmatchedModule] = field(default_factory=dict)
    fused_into: dict[int, list[str]] = field(default_factory=dict)  # tensor -> fused module paths

    def leave_out(self, call: CapturedCall, reason: UnmatchedReason, fused_into: str | None = None) -> None:
        self.unmatched[call.key] = UnmatchedModule(call.path, call.module_type, reason, fused_into=fused_into)

    def fuse(self, call: CapturedCall, t: int, tensors: Sequence[TensorInfo]) -> None:
        """Report module ``call`` as fused into tensor ``t`` (dropping its own row, if any)."""
        self.assignment.pop(call.key, None)
        self.leave_out(call, UnmatchedReason.FUSED, fused_into=tensors[t].name)
        self.fused_into.setdefault(t, []).append(call.path)


def match_each_module(
    in_order: Sequence[tuple[ModuleKey, CapturedCall]],
    ambiguous: set,
    by_output: Mapping[ModuleKey, int],
    graph: TensorScopes,
    tensors: Sequence[TensorInfo],
) -> MatchState:
    """Each module (in the order they finished) gets its tensor or the reason it has none:
    identity, ambiguous name, a model output, no tensor, fused, repeated calls, shape mismatch."""
    calls = dict(in_order)
    owner = {t: owner_is_last_finished_module(graph.scopes[t], calls) for t in graph.order}

    def is_adapter(t: int, key: ModuleKey) -> bool:
        return layout_op_feeding_a_module_is_an_adapter(graph.producer[t], key, graph.scopes)

    state = MatchState()
    for key, c in in_order:
        if c.output is None:
            continue
        if c.identity:
            state.leave_out(c, UnmatchedReason.IDENTITY)
            continue
        if key in ambiguous:
            state.leave_out(c, UnmatchedReason.AMBIGUOUS_NAME)
            continue
        if key in by_output:
            state.assignment[key] = by_output[key]
            continue
        carrying = [t for t in graph.order if any(is_under(s, key) for s in graph.scopes[t])]
        if not carrying:
            state.leave_out(c, UnmatchedReason.NO_TENSOR)
            continue
        owned = tensors_owned_except_adapters(key, carrying, owner, is_adapter)
        if not owned:
            host = fused_module_is_listed_on_the_op_it_fused_into(carrying, graph.producer)
            state.fuse(c, host, tensors)
            continue
        if not repeated_module_is_compared_only_when_each_call_left_tensors(c.calls, graph.order, owned):
            state.leave_out(c, UnmatchedReason.REPEATED_CALLS)
            continue
        chosen = owned[-1]
        if not layout_candidates(tensors[chosen].shape, tuple(c.output.shape)):
            state.leave_out(c, UnmatchedReason.SHAPE_MISMATCH)
            continue
        state.assignment[key] = chosen
    return state


def folded_batch_norm_is_compared_after_the_fold(
    state: MatchState,
    in_order: Sequence[tuple[ModuleKey, CapturedCall]],
    tensors: Sequence[TensorInfo],
    graph_outputs: Sequence[int],
) -> None:
    """A module no tensor names whose input was a matched module's output was folded into that
    module before conversion (PT2E folds BatchNorm into the conv's weights and drops the BN node):
    the tensor holds the folded module's output, so it is compared with that instead, and the
    module it was folded into is reported as fused.

    This comes before sharing rows: a folded BN that ends a Sequential returns the Sequential's
    tensor, and sharing that row would leave the conv (which finished first) as its reference.
    """
    calls = dict(in_order)
    for key, c in in_order:
        miss = state.unmatched.get(key)
        if miss is None or miss.reason != UnmatchedReason.NO_TENSOR or c.in_id is None:
            continue
        sources = [k for k in state.assignment if calls[k].out_id == c.in_id]
        if not sources:
            continue
        t = state.assignment[sources[0]]
        if any(state.assignment[k] != t for k in sources) or t in graph_outputs:
            continue
        if not layout_candidates(tensors[t].shape, tuple(c.output.shape)):
            continue
        for k in sources:
            state.fuse(calls[k], t, tensors)
        del state.unmatched[key]
        state.assignment[key] = t


def conv_before_a_folded_output_batch_norm_is_fused_into_the_output(
    state: MatchState,
    in_order: Sequence[tuple[ModuleKey, CapturedCall]],
    by_output: Mapping[ModuleKey, int],
    graph: TensorScopes,
    tensors: Sequence[TensorInfo],
) -> None:
    """The same fold when the BatchNorm's output is a model output: the BN was matched to the
    output tensor, and the conv to the value computed before the output's TRANSPOSE or
    DEQUANTIZE, which is already the BN's (folded) output, not the conv's: the conv is reported
    as fused into the output row. A BN that named a tensor of its own was not folded."""
    calls = dict(in_order)
    for key, c in in_order:
        out = by_output.get(key)
        if out is None or state.assignment.get(key) != out or c.in_id is None or "BatchNorm" not in c.module_type:
            continue
        if any(is_under(s, key) for t in graph.order for s in graph.scopes[t]):
            continue
        upstream: set[int] = set()  # tensors the output is only a layout change or requantization of
        t = out
        while (op := graph.producer.get(t)) is not None and op.opcode in DATA_MOVEMENT_OPS:
            moved = [i for i in op.inputs if i >= 0 and not tensors[i].is_constant]
            if len(moved) != 1:
                break
            t = moved[0]
            upstream.add(t)
        for k in [k for k in state.assignment if k != key and calls[k].out_id == c.in_id]:
            if state.assignment[k] not in upstream:
                continue
            state.fuse(calls[k], out, tensors)


def module_returning_a_matched_tensor_shares_its_row(
    state: MatchState, in_order: Sequence[tuple[ModuleKey, CapturedCall]]
) -> None:
    """A module left out (no tensor, fused, repeated calls, ...) that returns the very tensor a
    matched module returned (a Sequential and its last child; a ReLU6 whose op the converter named
    after its enclosing block) shares that module's tensor. Identity modules and ambiguous names
    stay out."""
    calls = dict(in_order)
    for key, c in in_order:
        miss = state.unmatched.get(key)
        if miss is None or miss.reason in (UnmatchedReason.IDENTITY, UnmatchedReason.AMBIGUOUS_NAME):
            continue
        same = [k for k in state.assignment if c.out_id is not None and calls[k].out_id == c.out_id]
        if same:
            if miss.reason == UnmatchedReason.FUSED:
                for paths in state.fused_into.values():
                    if c.path in paths:
                        paths.remove(c.path)
            del state.unmatched[key]
            state.assignment[key] = state.assignment[same[0]]


def innermost_module_owns_the_row(
    assignment: Mapping[ModuleKey, int], calls: Calls, position: Mapping[int, int]
) -> dict[int, tuple[ModuleKey, ...]]:
    """One row per matched tensor, in flatbuffer order: its modules, the innermost (first to
    finish) first; the enclosing ones (a Sequential and its last child) are listed on the row."""
    by_tensor: dict[int, list[ModuleKey]] = {}
    for key, t in assignment.items():
        by_tensor.setdefault(t, []).append(key)
    return {
        t: tuple(sorted(by_tensor[t], key=lambda k: calls[k].finished))
        for t in sorted(by_tensor, key=lambda t: position[t])
    }


@dataclass(frozen=True)
class LayerMatch:
    """What matching found: rows (tensor -> its modules, innermost first, in flatbuffer order),
    the modules fused into each row, the modules left out, and the flatbuffer side it read."""

    graph: TensorScopes
    rows: dict[int, tuple[ModuleKey, ...]]
    fused_into: dict[int, list[str]]
    unmatched_modules: tuple[UnmatchedModule, ...]


def match_layers(
    tensors: Sequence[TensorInfo],
    operators: Sequence[OperatorInfo],
    sample: CapturedSample,
    root_name: str,
    graph_outputs: Sequence[int],
) -> LayerMatch:
    """Apply the rules, in the order of the module docstring, to one captured sample."""
    calls = sample.calls
    graph = read_tensor_scopes(tensors, operators, sample.tensors, graph_outputs, root_name, calls)
    output_ids = [tensor_identity(o) for o in sample.outputs]
    by_output = module_returning_a_model_output_takes_the_output_tensor(
        calls, output_ids, graph_outputs, sample.tensors
    )
    in_order = sorted(calls.items(), key=lambda kv: kv[1].finished)
    state = match_each_module(in_order, sample.ambiguous, by_output, graph, tensors)
    folded_batch_norm_is_compared_after_the_fold(state, in_order, tensors, graph_outputs)
    conv_before_a_folded_output_batch_norm_is_fused_into_the_output(state, in_order, by_output, graph, tensors)
    module_returning_a_matched_tensor_shares_its_row(state, in_order)
    return LayerMatch(
        graph=graph,
        rows=innermost_module_owns_the_row(state.assignment, calls, graph.position),
        fused_into=state.fused_into,
        unmatched_modules=tuple(state.unmatched[k] for k, _ in in_order if k in state.unmatched),
    )
