"""Drop the names of a model's inner tensors (``--strip-names``).

litert-torch names every tensor after the module stack of the nodes that made it, often hundreds of
characters: 15% of a small int8 CNN, bytes a microcontroller keeps in flash for nothing. The
runtimes never read them, so the model runs bit-identically; the subgraphs' input and output tensors
keep their names (apps look tensors up by them). What is lost is the map from tensors back to
PyTorch modules that per-layer parity and the reports' module paths use, so this pass runs after
every check.
"""

from __future__ import annotations

from typing import Any

__all__ = ["strip_tensor_names_pass"]


def strip_tensor_names_pass(model: Any) -> bool:
    """Empty the name of every tensor that is not a subgraph input or output; True if any changed."""
    modified = False
    for sg in model.subgraphs or ():
        keep = {int(i) for i in (*(sg.inputs if sg.inputs is not None else ()), *(sg.outputs if sg.outputs is not None else ()))}
        for index, tensor in enumerate(sg.tensors or ()):
            if index not in keep and tensor.name != b"":
                # b"" rather than None: an absent name and an empty one are different bytes, and
                # earlier releases wrote the empty string.
                tensor.name = b""
                modified = True
    return modified
