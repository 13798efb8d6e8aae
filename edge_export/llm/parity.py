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
- **chat**, when the package has a chat template: one user turn through the runtime's Conversation
  API (the packaged template, greedy) against transformers' ``apply_chat_template(...,
  add_generation_prompt=True)`` + ``generate()`` (greedy), compared as text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import RuntimeRunError, first_line

__all__ = ["continuation_text", "ReferenceRun", "ChatReference", "reference_chat", "runtime_chat_text", "import_runtime", "StepMetrics", "reference_runs", "logit_metrics", "runtime_texts", "first_text_divergence"]


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


@dataclass(frozen=True)
class ChatReference:
    message: str  # the user's turn
    prompt_ids: tuple[int, ...]  # transformers' chat-template prompt
    generated_ids: tuple[int, ...]
    text: str


def _greedy(model: Any, tokenizer: Any, ids: Any, max_new_tokens: int, stop_ids: Sequence[int]) -> Any:
    import torch

    with torch.no_grad():
        return model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
            eos_token_id=list(stop_ids) or None, pad_token_id=tokenizer.pad_token_id,
            output_logits=True, return_dict_in_generate=True,
        )


def reference_chat(model: Any, tokenizer: Any, message: str, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Sequence[int]) -> ChatReference:
    """transformers' greedy reply to ``message`` from its chat-template prompt ``prompt_ids``
    (rendered in the bounded child: tokenizer_check.chat_prompt_ids_bounded)."""
    import torch

    out = _greedy(model, tokenizer, torch.tensor([list(prompt_ids)]), max_new_tokens, stop_ids)
    generated = out.sequences[0, len(prompt_ids):].tolist()
    return ChatReference(message, tuple(prompt_ids), tuple(generated), continuation_text(tokenizer, generated, stop_ids))


def reference_runs(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int, stop_ids: Sequence[int]) -> list[ReferenceRun]:
    """transformers' greedy continuation of each prompt and its logits at every step."""
    import torch

    runs = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        out = _greedy(model, tokenizer, ids, max_new_tokens, stop_ids)
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


def import_runtime() -> Any:
    """The LiteRT-LM runtime module; missing or failing to import (its shared library), exit 3
    naming the environment, not a bug."""
    try:
        import litert_lm
    except (ImportError, OSError) as exc:
        raise RuntimeRunError(
            f"The LiteRT-LM runtime (litert-lm-api) cannot be imported ({first_line(exc, with_type=True)}), so the .litertlm cannot be run.",
            "pip install 'edge-export[llm]' (the runtime is how the .litertlm is checked and run).",
        ) from exc
    return litert_lm


def message_text(message: Any) -> str:
    """The text of a Conversation reply (litert_lm's Message: its text parts joined)."""
    if hasattr(message, "contents"):
        return str(message.contents)
    content = message.get("content") if isinstance(message, dict) else message
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def runtime_chat_text(litertlm_path: str, message: str, max_new_tokens: int) -> str:
    """The runtime's greedy reply to one user turn through its Conversation API (the packaged template)."""
    litert_lm = import_runtime()
    try:
        with litert_lm.Engine(litertlm_path, backend=litert_lm.Backend.CPU(thread_count=1)) as engine:
            conv = engine.create_conversation(sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=max_new_tokens)
            try:
                return message_text(conv.send_message({"role": "user", "content": message}))
            finally:
                conv.close()
    except Exception as exc:  # boundary: the runtime renders the packaged template in C++ and says only "failed"
        raise RuntimeRunError(
            f"LiteRT-LM's Conversation API failed on the packaged chat template: {first_line(exc)}.",
            "Run with --verbose to see the runtime's own message; the chat template may use Jinja the runtime does not support.",
        ) from exc


def runtime_texts(litertlm_path: str, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    """Each prompt's greedy continuation in the LiteRT-LM runtime (CPU, one thread). Speed is
    timed apart (speed.measure_speed), on the recipe kept."""
    litert_lm = import_runtime()
    texts = []
    try:
        with litert_lm.Engine(litertlm_path, backend=litert_lm.Backend.CPU(thread_count=1)) as engine:
            for prompt in prompts:
                session = engine.create_session(
                    apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=max_new_tokens
                )
                try:
                    session.run_prefill([prompt])
                    texts.append("".join(session.run_decode().texts[:1]))
                finally:
                    session.close()
    except Exception as exc:  # boundary: the runtime's C API says only "failed" (the reason went to stderr)
        raise RuntimeRunError(
            f"The LiteRT-LM runtime failed on the .litertlm: {first_line(exc)}.",
            "Run with --verbose to see the runtime's own message.",
        ) from exc
    return texts


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
