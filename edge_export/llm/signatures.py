"""Drive the exported flatbuffer's ``prefill_<N>`` and ``decode`` signatures directly, as the
LiteRT-LM runtime does, so that every step's logits can be compared with transformers'.

edge-export builds what the runtime builds: the token and position inputs, the additive causal
mask over the cache (0 where a position may be attended, the float32 minimum elsewhere) and the
KV cache tensors, fed back from each call's outputs. The prompt's tokens except the last go
through prefill in chunks of the longest prefill length (padded with the pad token; padded slots
write cache positions that the next real token overwrites before any mask admits them); then
every token from the prompt's last one goes through ``decode``, which returns the logits of the
next token. Prefill signatures return no logits. With several prefill lengths, each is driven in
turn (``teacher_forced_logits(..., prefill_length=N)``), so every exported signature is checked.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import RuntimeRunError, first_line

__all__ = ["SignatureDriver"]

_MASKED = np.finfo(np.float32).min


class SignatureDriver:
    def __init__(self, tflite: bytes, pad_token_id: int = 0) -> None:
        from ai_edge_litert.interpreter import Interpreter

        try:
            self._interpreter = Interpreter(model_content=tflite, num_threads=1)
            signatures = self._interpreter.get_signature_list()
        except Exception as exc:  # boundary: LiteRT reading the model
            raise RuntimeRunError(f"LiteRT cannot load the exported model: {first_line(exc)}.", "Run with --debug.") from exc
        prefills = sorted(int(k.split("_")[1]) for k in signatures if k.startswith("prefill_") and k.split("_")[1].isdigit())
        if "decode" not in signatures or not prefills:
            raise RuntimeRunError(f"The model's signatures are {sorted(signatures)}, not prefill_<N> and decode.", "Export it again.")
        self.prefill_lengths = tuple(prefills)
        self._prefills = {n: self._interpreter.get_signature_runner(f"prefill_{n}") for n in prefills}
        self._decode = self._interpreter.get_signature_runner("decode")
        inputs = self._decode.get_input_details()
        self.cache_names = tuple(sorted(n for n in inputs if n.startswith("kv_cache_")))
        self._cache_specs = {n: (tuple(inputs[n]["shape"]), inputs[n]["dtype"]) for n in self.cache_names}
        self.cache_length = int(inputs["mask"]["shape"][-1])
        self.pad_token_id = pad_token_id

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of every KV cache tensor at the exported cache length."""
        return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in self._cache_specs.values())

    def _empty_cache(self) -> dict[str, np.ndarray]:
        return {n: np.zeros(shape, dtype) for n, (shape, dtype) in self._cache_specs.items()}

    def _mask(self, positions: np.ndarray) -> np.ndarray:
        allowed = np.arange(self.cache_length)[None, :] <= positions[:, None]
        return np.where(allowed, 0.0, _MASKED).astype(np.float32)[None, None]

    def _call(self, runner, tokens: np.ndarray, positions: np.ndarray, cache: dict) -> dict:
        try:
            return runner(tokens=tokens[None].astype(np.int32), input_pos=positions.astype(np.int32), mask=self._mask(positions), **cache)
        except Exception as exc:  # boundary: the LiteRT interpreter
            raise RuntimeRunError(f"LiteRT failed running the model: {first_line(exc)}.", "Run with --debug.") from exc

    def teacher_forced_logits(self, prompt: Sequence[int], continuation: Sequence[int], prefill_length: int | None = None) -> np.ndarray:
        """Logits [len(continuation), vocab]: row i predicts continuation[i], having seen the
        prompt and continuation[:i] (the reference's tokens, not the model's own choices). The
        prompt is prefilled through ``prefill_<prefill_length>`` (default: the longest)."""
        if len(prompt) + len(continuation) > self.cache_length:
            raise RuntimeRunError(f"{len(prompt) + len(continuation)} tokens do not fit the {self.cache_length}-token cache.", "")
        cache = self._empty_cache()
        head = np.asarray(prompt[:-1], dtype=np.int64)
        n = prefill_length or self.prefill_lengths[-1]
        runner = self._prefills[n]
        for start in range(0, len(head), n):
            chunk = head[start:start + n]
            tokens = np.full(n, self.pad_token_id, np.int64)
            tokens[: len(chunk)] = chunk
            positions = np.minimum(np.arange(start, start + n), self.cache_length - 1)  # padding past the cache's end
            out = self._call(runner, tokens, positions, cache)
            cache = {k: out[k] for k in self.cache_names}
        feed = [prompt[-1], *continuation[:-1]]
        rows = []
        for i, token in enumerate(feed):
            out = self._call(self._decode, np.asarray([token]), np.asarray([len(head) + i]), cache)
            cache = {k: out[k] for k in self.cache_names}
            rows.append(np.asarray(out["logits"], dtype=np.float64).reshape(-1))
        return np.stack(rows) if rows else np.zeros((0, 0))
