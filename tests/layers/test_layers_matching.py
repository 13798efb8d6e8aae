"""The pure pieces of per-layer matching: layouts and the jump rule (tensor names: test_core_provenance.py)."""

from __future__ import annotations

import numpy as np

from edge_export.validators.layers import first_jump_index
from edge_export.validators.per_layer.layout import apply_layout as _apply_layout
from edge_export.validators.per_layer.layout import layout_candidates as _layout_candidates

def test_nhwc_to_nchw_is_found_from_shapes():
    cands = _layout_candidates((1, 12, 16, 8), (1, 8, 12, 16))
    assert [label for label, _ in cands] == ["NHWC->NCHW"]
    x = np.arange(1 * 12 * 16 * 8, dtype=np.float32).reshape(1, 12, 16, 8)
    np.testing.assert_array_equal(_apply_layout(x, cands[0][1], (1, 8, 12, 16)), x.transpose(0, 3, 1, 2))


def test_ambiguous_shapes_list_identity_then_channels_first_first():
    labels = [label for label, _ in _layout_candidates((1, 8, 8, 8), (1, 8, 8, 8))]
    assert labels[:2] == ["identity", "NHWC->NCHW"]
    assert len(labels) == 6  # every order of the three non-batch axes fits


def test_size_one_axes_are_ignored_and_other_sizes_refused():
    cands = _layout_candidates((5, 16), (1, 5, 16))
    assert [label for label, _ in cands] == ["squeeze+identity"]
    x = np.ones((5, 16), dtype=np.float32)
    assert _apply_layout(x, cands[0][1], (1, 5, 16)).shape == (1, 5, 16)
    assert _layout_candidates((5, 16), (1, 5, 8)) == []


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
