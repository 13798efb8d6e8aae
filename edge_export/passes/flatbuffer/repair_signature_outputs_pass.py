"""Point a signature's outputs back at the subgraph's outputs after ai-edge-quantizer moved them.

When a model output is also read inside the graph (a GRU's ``h_n`` is the last step of its
``output``), ai-edge-quantizer gives the subgraph a new output tensor, a QUANTIZE of the old one
(``serving_default_output_1_output_quantized``), and leaves the signature naming the old tensor.
The verifier then refuses the model ("signature 'serving_default' names tensor 217 as an output,
but it is not an output of subgraph 0") and every int8 candidate of a GRU failed. The signature
entry is moved to the one subgraph output, named by no signature entry, that an operator computes
from the tensor it named; an entry with no such output, or several, is left for the verifier.
"""

from __future__ import annotations

from typing import Any

__all__ = ["repair_signature_outputs_pass"]


def _replacement(sg: Any, named: int, unnamed: list[int]) -> int | None:
    found = [
        out for out in unnamed
        if any(out in list(op.outputs) and named in list(op.inputs) for op in sg.operators)
    ]
    return found[0] if len(found) == 1 else None


def repair_signature_outputs_pass(model: Any) -> bool:
    """Signature outputs naming a tensor that is not a subgraph output are moved to the output
    computed from it; returns whether any entry moved."""
    changed = False
    for signature in model.signatureDefs or []:
        sg = model.subgraphs[int(signature.subgraphIndex or 0)]
        outputs = [int(i) for i in (sg.outputs if sg.outputs is not None else [])]
        named = {int(tm.tensorIndex) for sd in model.signatureDefs for tm in (sd.outputs or [])}
        unnamed = [o for o in outputs if o not in named]
        for entry in signature.outputs or []:
            if int(entry.tensorIndex) in outputs:
                continue
            replacement = _replacement(sg, int(entry.tensorIndex), unnamed)
            if replacement is not None:
                entry.tensorIndex = replacement
                unnamed.remove(replacement)
                changed = True
    return changed
