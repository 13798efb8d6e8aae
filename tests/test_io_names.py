"""io_names: where the signature names come from, and which overrides are refused."""

from __future__ import annotations

import pytest
import torch

from edge_export.errors import UsageError
from edge_export.artifacts.io_names import (
    check_names,
    check_signature_key,
    forward_parameter_names,
    resolve_names,
)


class _Named(torch.nn.Module):
    def forward(self, pixel_values, attention_mask=None):
        return pixel_values


class _VarArgs(torch.nn.Module):
    def forward(self, *inputs):
        return inputs[0]


def test_forward_parameter_names_follow_the_signature_and_stop_at_var_args():
    assert forward_parameter_names(_Named(), 2) == ["pixel_values", "attention_mask"]
    assert forward_parameter_names(_Named(), 1) == ["pixel_values"]
    assert forward_parameter_names(_VarArgs(), 2) == [None, None]


def test_resolve_names_prefers_override_then_model_then_converter():
    assert resolve_names(("a", "b"), ["x", "y"], ["args_0", "args_1"]) == ("a", "b")
    assert resolve_names((), ["x", None], ["args_0", "args_1"]) == ("x", "args_1")
    assert resolve_names((), ["not valid", "y"], ["args_0", "args_1"]) == ("args_0", "y")
    # model names that would collide with each other leave the converter's names in place
    assert resolve_names((), ["x", "x"], ["args_0", "args_1"]) == ("args_0", "args_1")


@pytest.mark.parametrize(
    "names, message",
    [(("a", "1b"), "'1b' is not a valid name"), (("a", "a"), "names a more than once"), (("class",), "'class'")],
)
def test_check_names_refuses_non_identifiers_and_duplicates(names, message):
    with pytest.raises(UsageError, match=message):
        check_names(names, "--input-names")
    assert check_names(("a", "b"), "--input-names") == ("a", "b")


def test_check_signature_key():
    assert check_signature_key("serving_default") == "serving_default"
    with pytest.raises(UsageError, match="not a valid signature name"):
        check_signature_key("my-key")
