"""The safetensors header reader (edge_export/llm/safetensors_header.py): each refusal, a clean file,
a sharded folder's index, and a fuzzer of headers. No transformers: each case takes milliseconds."""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_folder_mutations import join_safetensors, mutate_safetensors, split_safetensors, valid_safetensors  # noqa: E402

from edge_export.errors import ModelLoadError  # noqa: E402
from edge_export.llm.safetensors_header import MAX_HEADER_BYTES, check_weight_files, read_safetensors_header  # noqa: E402


@pytest.fixture(scope="module")
def valid() -> bytes:
    return valid_safetensors()


def _write(tmp_path: Path, data: bytes, name: str = "model.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(ModelLoadError) as info:
        read_safetensors_header(path)
    assert info.value.exit_code == 2 and str(path) in str(info.value) and info.value.hint
    return " ".join(str(info.value).split())


def _edited(valid: bytes, edit) -> bytes:
    """``valid`` with its header changed in place by ``edit``."""
    header, payload = split_safetensors(valid)
    edit(header)
    return join_safetensors(header, payload)


def test_a_clean_file_passes_and_is_read_exactly(valid, tmp_path):
    from safetensors.numpy import load

    header = read_safetensors_header(_write(tmp_path, valid))
    loaded = load(valid)
    assert {t.name for t in header.tensors} == set(loaded)
    for t in header.tensors:
        assert t.shape == loaded[t.name].shape and t.end - t.begin == loaded[t.name].nbytes
    assert [t.begin for t in header.tensors] == sorted(t.begin for t in header.tensors)
    assert header.tensors[-1].end == header.data_bytes and dict(header.metadata) == {"format": "pt", "note": "tiny"}


def test_a_sharded_folder_passes(tmp_path):
    """Two shards and the index transformers writes for them (``metadata.total_size``, ``weight_map``)."""
    import numpy as np
    from safetensors.numpy import save_file

    shards = {"model-00001-of-00002.safetensors": {"a.weight": np.ones((3, 4), np.float32)},
              "model-00002-of-00002.safetensors": {"b.weight": np.zeros(5, np.int8), "b.bias": np.ones(2, np.float16)}}
    for name, tensors in shards.items():
        save_file(tensors, tmp_path / name, metadata={"format": "pt"})
    weight_map = {tensor: name for name, tensors in shards.items() for tensor in tensors}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 57}, "weight_map": weight_map}))
    headers = check_weight_files(tmp_path)
    assert {h.path.name: {t.name for t in h.tensors} for h in headers} == {n: set(t) for n, t in shards.items()}


def test_a_header_length_of_2_to_the_62(valid, tmp_path):
    path = _write(tmp_path, struct.pack("<Q", 2**62) + valid[8:])
    started = time.monotonic()
    assert f"header length is {2**62} bytes, more than the {MAX_HEADER_BYTES}" in _refusal(path)
    assert time.monotonic() - started < 0.5


def test_a_header_length_past_the_end_of_the_file(valid, tmp_path):
    path = _write(tmp_path, struct.pack("<Q", len(valid)) + valid[8:])
    assert "but the file holds only" in _refusal(path)


def test_a_file_shorter_than_the_length_field(tmp_path):
    assert "shorter than the 8-byte header length" in _refusal(_write(tmp_path, b"\x01\x00"))


def test_a_header_that_is_not_a_json_object(valid, tmp_path):
    assert "does not start with '{'" in _refusal(_write(tmp_path, join_safetensors(["x"], b"")))
    _, payload = split_safetensors(valid)
    assert "not valid JSON" in _refusal(_write(tmp_path, join_safetensors(None, payload, raw=b'{"a": ')))
    assert "not UTF-8" in _refusal(_write(tmp_path, join_safetensors(None, payload, raw=b'{"\xff": 1}')))


def test_a_duplicate_tensor_name(valid, tmp_path):
    raw = b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}'
    assert "names 'a' twice" in _refusal(_write(tmp_path, join_safetensors(None, b"x", raw=raw)))


def test_floats_nan_and_deep_nesting(valid, tmp_path):
    raw = b'{"a": {"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}}'
    assert "holds the number 1.0" in _refusal(_write(tmp_path, join_safetensors(None, b"x", raw=raw)))
    raw = b'{"a": {"dtype": "U8", "shape": [NaN], "data_offsets": [0, 1]}}'
    assert "holds the number NaN" in _refusal(_write(tmp_path, join_safetensors(None, b"x", raw=raw)))
    raw = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert "not valid JSON" in _refusal(_write(tmp_path, join_safetensors(None, b"", raw=raw)))


def test_an_entry_that_is_not_a_tensor(valid, tmp_path):
    path = _write(tmp_path, _edited(valid, lambda h: h.update({"x": "text"})))
    assert "entry 'x' is not an object" in _refusal(path)
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].update({"offsets": [0, 1]})))
    assert "tensor 'mask' holds 'offsets' (a tensor has exactly dtype, shape and data_offsets)" in _refusal(path)
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].pop("shape")))
    assert "tensor 'mask' has no shape" in _refusal(path)


def test_metadata_must_map_strings_to_strings(valid, tmp_path):
    path = _write(tmp_path, _edited(valid, lambda h: h.update({"__metadata__": {"format": 1}})))
    assert "__metadata__ is not an object of strings" in _refusal(path)


def test_an_unknown_dtype(valid, tmp_path):
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].update({"dtype": "F128"})))
    assert "dtype 'F128', which is not a safetensors dtype" in _refusal(path)


@pytest.mark.parametrize("shape", [[-1], [2.5], ["3"], [True], 3, [2**64]])
def test_a_shape_that_is_not_non_negative_integers(valid, tmp_path, shape):
    reason = _refusal(_write(tmp_path, _edited(valid, lambda h: h["mask"].update({"shape": shape}))))
    # a float is refused by the JSON reader already
    assert ("holds the number 2.5" if shape == [2.5] else "not a list of non-negative integers") in reason


@pytest.mark.parametrize("offsets", [[0], [3, 1], [0, 1, 2], "0:3", [-1, 2]])
def test_offsets_that_are_not_begin_end(valid, tmp_path, offsets):
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].update({"data_offsets": offsets})))
    assert "not [begin, end] integers with begin <= end" in _refusal(path)


def test_a_byte_count_other_than_shape_times_dtype(valid, tmp_path):
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].update({"shape": [4]})))
    assert "tensor 'mask' (BOOL, shape '[4]') needs 4 bytes but its data_offsets span 3" in _refusal(path)
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].update({"dtype": "F4"})))
    assert "needs 1.5 bytes" in _refusal(path)  # sub-byte dtypes: whole bytes only
    path = _write(tmp_path, _edited(valid, lambda h: h["mask"].update({"shape": [2**40] * 8})))
    assert "needs more than 2**64 bytes" in _refusal(path)


def test_offsets_past_the_end_of_the_data(valid, tmp_path):
    header, payload = split_safetensors(valid)
    header["embed.weight"]["data_offsets"] = [len(payload) + 1000, len(payload) + 1096]
    reason = _refusal(_write(tmp_path, join_safetensors(header, payload)))
    assert f"tensor 'embed.weight' ends at byte {len(payload) + 1096} of the data, past its end ({len(payload)} bytes)" in reason


def test_overlapping_tensors(tmp_path):
    header = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}
    assert "tensor 'b' overlaps tensor 'a' (bytes 2-4)" in _refusal(_write(tmp_path, join_safetensors(header, b"abcdef")))


def test_bytes_that_belong_to_no_tensor(valid, tmp_path):
    header, payload = split_safetensors(valid)
    assert "the last 5 bytes of the data belong to no tensor" in _refusal(_write(tmp_path, join_safetensors(header, payload + b"hello")))
    last = max((t for t in header if t != "__metadata__"), key=lambda t: header[t]["data_offsets"])
    begin, end = header[last]["data_offsets"]
    header[last]["data_offsets"] = [begin + 4, end + 4]
    reason = _refusal(_write(tmp_path, join_safetensors(header, payload + b"pad!")))
    assert f"bytes {begin}-{begin + 4} of the data belong to no tensor" in reason


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert "not a regular file" in _refusal(fifo)  # never blocks waiting for a writer
    assert time.monotonic() - started < 1


def _sharded(tmp_path: Path, valid: bytes, weight_map: dict) -> Path:
    _write(tmp_path, valid, "model-00001-of-00001.safetensors")
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    return index


def test_a_shard_index_must_name_files_of_the_folder_and_their_tensors(valid, tmp_path):
    _sharded(tmp_path, valid, {"mask": "model-00001-of-00001.safetensors"})
    assert len(check_weight_files(tmp_path)) == 1
    for weight_map, words in (
        ({"mask": "../elsewhere/model.safetensors"}, "which is not a .safetensors file of this folder"),
        ({"mask": "model-00002-of-00002.safetensors"}, "which is not a .safetensors file of this folder"),
        ({"no.such.tensor": "model-00001-of-00001.safetensors"}, "whose header does not list it"),
        ({"mask": 3}, "which is not a .safetensors file of this folder"),
    ):
        index = _sharded(tmp_path, valid, weight_map)
        with pytest.raises(ModelLoadError) as info:
            check_weight_files(tmp_path)
        assert words in str(info.value) and str(index) in str(info.value)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {}, "extra": 1}')
    with pytest.raises(ModelLoadError, match="not an object of a weight_map and optional metadata"):
        check_weight_files(tmp_path)


def _accepted_file_is_sound(header, path: Path) -> None:
    """What the reader accepts, the safetensors library (its own Rust header check) opens too,
    with the same tensors and shapes."""
    from safetensors import safe_open

    reached = 0
    for t in header.tensors:
        assert t.begin == reached and t.end >= t.begin
        reached = t.end
    assert reached == header.data_bytes == path.stat().st_size - 8 - header.header_bytes
    with safe_open(str(path), framework="np") as f:
        assert {t.name: list(t.shape) for t in header.tensors} == {k: f.get_slice(k).get_shape() for k in f.keys()}


def test_fuzzed_headers_are_refused_cleanly_or_sound(valid, tmp_path):
    """1,000 structure-aware mutants (bytes and JSON fields), seeded: each either passes every check
    (and then the safetensors library reads it too) or is a ModelLoadError; nothing else, fast.
    benchmarks/safetensors_fuzz.py runs more."""
    rng = random.Random(20261203)
    path = tmp_path / "mutant.safetensors"
    outcomes: dict[str, int] = {"accepted": 0, "refused": 0}
    started = time.monotonic()
    for _ in range(1000):
        kind, data = mutate_safetensors(valid, rng)
        path.write_bytes(data)
        try:
            header = read_safetensors_header(path)
        except ModelLoadError as exc:
            assert exc.exit_code == 2 and str(path) in str(exc), (kind, exc)
            outcomes["refused"] += 1
            continue
        _accepted_file_is_sound(header, path)
        outcomes["accepted"] += 1
    assert outcomes["refused"] > 700 and outcomes["accepted"] > 10, outcomes
    assert time.monotonic() - started < 20


def test_a_hostile_tensor_name_is_shown_escaped_and_cut(tmp_path):
    """Names come from the file: in a message they are a repr (no raw escape sequence), at most 80 characters."""
    name = "\x1b[2J\x1b[Hall checks PASSED" + "x" * 500
    header = {name: {"dtype": "U8", "shape": [9], "data_offsets": [0, 4]}}
    reason = _refusal(_write(tmp_path, join_safetensors(header, b"abcd")))
    assert "\x1b" not in reason and "'\\x1b[2J\\x1b[Hall checks PASSED" in reason and "x" * 100 not in reason
