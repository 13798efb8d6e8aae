"""One recipe's model judged against transformers: teacher-forced logits through the flatbuffer's
signatures and greedy text through the LiteRT-LM runtime, per prompt, against the thresholds."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..config import scaled_atol
from .parity import ChatReference, ReferenceRun, first_text_divergence, logit_metrics
from .report import LlmChatParity, LlmPromptParity, LlmThresholds

__all__ = ["thresholds_for", "default_float_atol", "judge_prompt", "judge_chat", "KL_FLOAT", "KL_QUANTIZED"]

ATOL_FLOAT = 1e-4  # max |Δlogit| of a float32 export (measured: 1e-5 on the test models)
# float32 rounding grows with the logits' magnitude: measured 1.3e-5 at max |logit| 6.4 on the tiny
# Llama (2e-6 relative). The default is ATOL_FLOAT or this fraction of the largest |logit| transformers
# gave, whichever is larger (8x the measured ratio), so a real model's logits of 30-40 are not
# held to a bound set on logits of 6.
ATOL_FLOAT_RELATIVE = 1.25e-5
KL_FLOAT = 1e-6
KL_QUANTIZED = 0.05  # nats, mean over steps
AGREEMENT_QUANTIZED = 0.9


def default_float_atol(logit_scale: float) -> float:
    """The float32 max |Δlogit| when --atol is not given, for logits up to ``logit_scale`` in size
    (config.scaled_atol: the mechanism the parity check uses for every output)."""
    return scaled_atol(ATOL_FLOAT, ATOL_FLOAT_RELATIVE, logit_scale) or ATOL_FLOAT


def thresholds_for(recipe: str, atol: float | None, min_token_agreement: float | None, logit_scale: float = 0.0) -> LlmThresholds:
    """Float32 must match to ``atol`` (default: default_float_atol of the reference's largest
    |logit|) with every token and text identical; a quantized recipe is judged by its mean KL and
    token agreement (``--min-top1``), its text reported only."""
    if recipe == "none":
        limit = atol if atol is not None else default_float_atol(logit_scale)
        return LlmThresholds(limit, KL_FLOAT, min_token_agreement if min_token_agreement is not None else 1.0, True)
    return LlmThresholds(atol, KL_QUANTIZED, min_token_agreement if min_token_agreement is not None else AGREEMENT_QUANTIZED, False)


def _first_failure(diffs: Sequence[float], agree: Sequence[bool], t: LlmThresholds, ref: ReferenceRun, logits: np.ndarray, start: int) -> tuple[int, str] | None:
    for step, (diff, same) in enumerate(zip(diffs, agree)):
        where = f"decode at position {start + step}"
        if t.max_abs_logit_diff is not None and not diff <= t.max_abs_logit_diff:
            return step, f"{where}: max |Δlogit| {diff:.3g} > {t.max_abs_logit_diff:g}"
        if not same:
            return step, f"{where}: top-1 token {int(np.argmax(logits[step]))} instead of transformers' {ref.generated_ids[step]}"
    return None


def judge_prompt(ref: ReferenceRun, logits: np.ndarray, runtime_text: str | None, t: LlmThresholds, tokenizer: Any, stop_ids: Sequence[int]) -> LlmPromptParity:
    m = logit_metrics(ref.logits, logits)
    steps = len(m.kl)
    mean_kl = float(np.mean(m.kl)) if steps else 0.0
    agreement = float(np.mean(m.top1_agree)) if steps else 1.0
    max_diff = float(max(m.max_abs_logit_diff, default=0.0))
    divergence = None if runtime_text is None else first_text_divergence(tokenizer, ref.generated_ids, runtime_text, stop_ids)
    failed = []
    if t.max_abs_logit_diff is not None and not max_diff <= t.max_abs_logit_diff:
        failed.append("logits")
    if not mean_kl <= t.max_mean_kl:
        failed.append("kl")
    if not agreement >= t.min_token_agreement:
        failed.append("agreement")
    if t.identical_text and divergence is not None:
        failed.append("text")
    first = _first_failure(m.max_abs_logit_diff, m.top1_agree, t, ref, logits, len(ref.prompt_ids) - 1) if failed else None
    if failed and first is None:  # the logits passed step by step: the aggregate or the runtime's text failed
        if "text" in failed:
            first = (divergence, f"LiteRT-LM's text parts from transformers' at step {divergence}")
        else:
            first = (0, f"mean KL {mean_kl:.3g} over {steps} steps > {t.max_mean_kl:g}")
    return LlmPromptParity(
        prompt=ref.prompt, prompt_tokens=len(ref.prompt_ids), steps=steps, max_abs_logit_diff=max_diff, mean_kl=mean_kl,
        max_kl=float(max(m.kl, default=0.0)), token_agreement=agreement,
        first_failing_step=first[0] if first else None, failing_reason=first[1] if first else None,
        reference_text=ref.text, runtime_text=runtime_text, text_divergence_step=divergence, passed=not failed,
    )


def judge_chat(ref: ChatReference, runtime_text: str | None, error: str | None, t: LlmThresholds, tokenizer: Any,
               stop_ids: Sequence[int], start_token: int | None = None) -> LlmChatParity:
    """The chat turn: failed when the runtime could not run it and, for float32, when its reply is
    not transformers' (a quantized recipe's chat reply is reported, like its prompts' texts)."""
    reason = error
    if reason is None and t.identical_text and runtime_text != ref.text:
        step = first_text_divergence(tokenizer, ref.generated_ids, runtime_text or "", stop_ids)
        reason = f"LiteRT-LM's chat reply parts from transformers' at step {step}"
        if start_token is not None and ref.prompt_ids[:1] != (start_token,):
            # the runtime prepends the start token to every prompt, chat too; transformers' template does not
            reason += (f" (the runtime prepends the start token {start_token} to every prompt, chat too, but transformers' "
                       "chat prompt does not start with it: print {{ bos_token }} first in the template, with bos_token set in "
                       "tokenizer_config.json)")
    return LlmChatParity(ref.message, len(ref.prompt_ids), ref.text, runtime_text, reason, reason is None)
