"""Language-model parity against transformers in float32, on the same weights.

Two checks per prompt, both greedy over ``max_new_tokens`` steps:

- **logits**, teacher-forced: transformers' ``generate()`` gives the reference continuation; the
  flatbuffer's signatures (``signatures.SignatureDriver``) are fed the prompt and that
  continuation, and each step's next-token logits are compared with transformers' logits at the
  same position: max |Δlogit|, the KL divergence of the next-token distributions
  (KL(reference ‖ exported), nats) and top-1 agreement. Feeding the reference's tokens, not the
  model's own choices, keeps one early flip from hiding every later step.
- **end to end**: the .litertlm in the LiteRT-LM runtime (litert-lm-api, CPU, top-k 1): its text
  against transformers' ``generate()`` text; the first step where they part is reported with both
  continuations. Verdicts never use the runtime's text scoring (LiteRT-LM issue 3561).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import RuntimeRunError, first_line

__all__ = ["continuation_text", "ReferenceRun", "StepMetrics", "reference_runs", "logit_metrics", "runtime_texts", "first_text_divergence"]


@dataclass(frozen=True)
class ReferenceRun:
    prompt: str
    prompt_ids: tuple[int, ...]
    generated_ids: tuple[int, ...]
    text: str  # the continuation as decoded text (special tokens skipped)
    logits: np.ndarray  # [steps, vocab], row i predicts generated_ids[i]


@dataclass(frozen=True)
class StepMetrics:
    max_abs_logit_diff: tuple[float, ...]
    kl: tuple[float, ...]
    top1_agree: tuple[bool, ...]


def reference_runs(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int, stop_ids: Sequence[int]) -> list[ReferenceRun]:
    """transformers' greedy continuation of each prompt and its logits at every step."""
    import torch

    runs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                eos_token_id=list(stop_ids) or None, pad_token_id=tokenizer.pad_token_id,
                output_logits=True, return_dict_in_generate=True,
            )
        generated = out.sequences[0, ids.shape[1]:].tolist()
        logits = torch.cat([step[0:1] for step in out.logits]).double().numpy() if out.logits else np.zeros((0, 0))
        text = continuation_text(tokenizer, generated, stop_ids)
        runs.append(ReferenceRun(prompt, tuple(ids[0].tolist()), tuple(generated), text, logits[: len(generated)]))
    return runs


def continuation_text(tokenizer: Any, ids: Sequence[int], stop_ids: Sequence[int]) -> str:
    """Token ids as the runtime prints them: special tokens kept (the runtime decodes a generated
    <bos> as text), a final stop token dropped (the runtime stops before printing it)."""
    ids = list(ids)
    if ids and ids[-1] in stop_ids:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def logit_metrics(reference: np.ndarray, exported: np.ndarray) -> StepMetrics:
    """Per-step max |Δlogit|, KL(reference ‖ exported) and top-1 agreement. A non-finite logit
    makes that step's metrics inf (never NaN), so it fails every threshold."""
    rows = []
    for ref, got in zip(reference, exported):
        if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(got))):
            rows.append((math.inf, math.inf, False))
            continue
        lp, lq = _log_softmax(ref), _log_softmax(got)
        kl = float(np.sum(np.exp(lp) * (lp - lq)))
        rows.append((float(np.max(np.abs(ref - got))), max(kl, 0.0), int(np.argmax(ref)) == int(np.argmax(got))))
    return StepMetrics(tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows))


def runtime_texts(litertlm_path: str, prompts: Sequence[str], max_new_tokens: int) -> tuple[list[str], float | None, float | None]:
    """Each prompt's greedy continuation in the LiteRT-LM runtime (CPU, one thread), and the
    prefill and decode tokens/s of the last prompt as the runtime measures them."""
    try:
        import litert_lm
    except ImportError as exc:
        raise RuntimeRunError(
            "The LiteRT-LM runtime (litert-lm-api) is not installed, so the .litertlm cannot be run.",
            "pip install 'edge-export[llm]' (the runtime is how the .litertlm is checked).",
        ) from exc
    texts, prefill_tps, decode_tps = [], None, None
    try:
        engine = litert_lm.Engine(litertlm_path, backend=litert_lm.Backend.CPU(thread_count=1), enable_benchmark=True)
        with engine:
            for prompt in prompts:
                session = engine.create_session(
                    apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=max_new_tokens
                )
                session.run_prefill([prompt])
                texts.append("".join(session.run_decode().texts[:1]))
                info = session.get_benchmark_info()
                prefill_tps, decode_tps = info.last_prefill_tokens_per_second, info.last_decode_tokens_per_second
                session.close()
    except Exception as exc:  # boundary: the runtime's C API says only "failed" (the reason went to stderr)
        raise RuntimeRunError(
            f"The LiteRT-LM runtime failed on the .litertlm: {first_line(exc)}.",
            "Run with --verbose to see the runtime's own message.",
        ) from exc
    return texts, prefill_tps, decode_tps


def first_text_divergence(tokenizer: Any, generated_ids: Sequence[int], runtime_text: str, stop_ids: Sequence[int]) -> int | None:
    """The first step whose reference text is no longer a prefix of the runtime's text (compared
    as decoded text: re-tokenizing the runtime's text can split words differently), or None when
    the texts are identical."""
    if continuation_text(tokenizer, generated_ids, stop_ids) == runtime_text:
        return None
    for step in range(len(generated_ids)):
        if not runtime_text.startswith(continuation_text(tokenizer, generated_ids[: step + 1], stop_ids)):
            return step
    return len(generated_ids)  # the runtime went on past the reference's end
