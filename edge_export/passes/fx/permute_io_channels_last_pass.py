"""Write NHWC input/output permutes into an exported graph (``--channels-last`` on a GraphModule).

An nn.Module is wrapped by litert-torch's ``to_channel_last_io`` instead (``conversion.
wrap_channels_last``); re-tracing a wrapped GraphModule would drop the nn.Module paths that the
flatbuffer's tensor names (and so per-layer parity and the Edge TPU report) rely on, so the
permutes go into the graph itself, next to its placeholders and output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...graph.channels_last import ChannelsLastPlan

__all__ = ["permute_io_channels_last_pass"]


def permute_io_channels_last_pass(module: Any, plan: ChannelsLastPlan) -> Any:
    """A copy of ``module`` taking the planned inputs as NHWC and giving the planned outputs as NHWC."""
    import copy

    import torch

    gm = copy.deepcopy(module)
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i in plan.inputs:
        ph = placeholders[i]
        with graph.inserting_after(ph):
            nchw = graph.call_function(torch.ops.aten.permute.default, (ph, [0, 3, 1, 2]))
        ph.replace_all_uses_with(nchw, delete_user_cb=lambda user, _n=nchw: user is not _n)
    output = next(n for n in graph.nodes if n.op == "output")
    flat = list(output.args[0]) if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    for j in plan.outputs:
        with graph.inserting_before(output):
            flat[j] = graph.call_function(torch.ops.aten.permute.default, (flat[j], [0, 2, 3, 1]))
    if plan.outputs:
        output.args = (type(output.args[0])(flat) if isinstance(output.args[0], (tuple, list)) else flat[0],)
    graph.lint()
    gm.recompile()
    return gm
