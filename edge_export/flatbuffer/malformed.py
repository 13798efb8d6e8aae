"""The errors a flatbuffer that cannot be read or run raises (both exit 2, as ``FlatbufferError``)."""

from __future__ import annotations

from ..errors import FlatbufferError

__all__ = ["OversizedTensorError", "malformed"]


class OversizedTensorError(FlatbufferError):
    """A tensor larger than LiteRT can allocate: a well-formed file (a converter writes such a model
    for a pooling window far larger than its input), which no runtime can prepare."""

    def __init__(self, message: str, hint: str | None, tensor_name: str, shape: list[int], nbytes: int) -> None:
        super().__init__(message, hint)
        self.tensor_name, self.shape, self.nbytes = tensor_name, shape, nbytes


def malformed(origin_detail: str) -> FlatbufferError:
    """The error for a file that breaks a rule: ``origin_detail`` says which, after "The model is
    not a valid LiteRT flatbuffer:" (``read_flatbuffer`` puts the file's name in place of "The model")."""
    return FlatbufferError(
        f"The model is not a valid LiteRT flatbuffer: {origin_detail}. The file may be truncated "
        "or corrupted.",
        "Re-export the model, or check that the file was copied completely.",
    )
