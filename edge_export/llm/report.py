"""The report's ``language_model`` section: typed results, and their Markdown, JUnit and terminal
renderings, declared as a run section (``plugins/report_sections.RunSection``) that
reports/markdown.py, junit.py and summary.py call when the section is present, without importing llm/.

    LanguageModelSection
      task, weights_format, prefill_lengths, cache_length, max_new_tokens, quantize, block_size
      package: PackageMetadata                  what the .litertlm's LLM metadata says
      chosen: str                               the recipe written (auto: the smallest that passed)
      attempts: LlmRecipeAttempt[]              every recipe checked (one without auto)
        weights: WeightGroup[]                  bytes and storage type per group (embedding, attention, mlp, lm_head)
        thresholds: LlmThresholds, prompts: LlmPromptParity[]
        chat: LlmChatParity | None              one user turn through LiteRT-LM's Conversation API
      measurements: LlmMeasurements             sizes, KV-cache bytes, peak RSS, tokens/s
      passed (derived: the chosen attempt passed)

Model text (prompts, continuations) is escaped before it reaches Markdown or the terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..output.serialize import json_field
from ..output.text_safety import escape_markdown
from ..plugins.report_sections import RunSection, register_run_section
from .packaging import PackageMetadata
from .recipes import WeightGroup
from .sizing import LlmSizing
from .speed import LlmSpeed

__all__ = [
    "LlmThresholds", "LlmPromptParity", "LlmChatParity", "LlmRecipeAttempt", "LlmMeasurements", "LanguageModelSection",
    "markdown_lines", "junit_cases", "summary_lines", "attempt_shortfall",
]


@dataclass(frozen=True)
class LlmThresholds:
    max_abs_logit_diff: float | None  # None: not gated (quantized recipes)
    max_mean_kl: float  # nats, mean over the steps of all prompts
    min_token_agreement: float  # teacher-forced top-1 agreement over all steps
    identical_text: bool  # the runtime's greedy text must equal transformers' generate()


@dataclass(frozen=True)
class LlmPromptParity:
    prompt: str
    prompt_tokens: int
    steps: int  # greedy steps compared (generate() may stop early at a stop token)
    max_abs_logit_diff: float = json_field(digits=8)
    mean_kl: float = json_field(digits=8)
    max_kl: float = json_field(digits=8)
    token_agreement: float = json_field(digits=6)
    first_failing_step: int | None  # the first step over a threshold, or None
    failing_reason: str | None
    reference_text: str  # transformers' generate() continuation
    runtime_text: str | None  # the LiteRT-LM runtime's continuation (None: not run)
    text_divergence_step: int | None  # the first step where the texts part (None: identical or not run)
    passed: bool


@dataclass(frozen=True)
class LlmChatParity:
    """One user turn: LiteRT-LM's Conversation API (the packaged chat template) against
    transformers' apply_chat_template(add_generation_prompt=True) + greedy generate()."""

    message: str
    prompt_tokens: int  # transformers' chat-template prompt
    reference_text: str
    runtime_text: str | None  # None: the runtime failed (failing_reason says how)
    failing_reason: str | None
    passed: bool


@dataclass(frozen=True)
class LlmRecipeAttempt:
    recipe: str
    model_bytes: int
    weights: tuple[WeightGroup, ...]
    thresholds: LlmThresholds
    max_abs_logit_diff: float = json_field(digits=8)
    mean_kl: float = json_field(digits=8)
    token_agreement: float = json_field(digits=6)
    identical_texts: int | None  # prompts whose runtime text equals transformers' (None: runtime not run)
    prompts: tuple[LlmPromptParity, ...]
    passed: bool
    chat: LlmChatParity | None = None  # None: the package has no chat template


@dataclass(frozen=True)
class LlmMeasurements:
    tflite_bytes: int
    litertlm_bytes: int
    kv_cache_bytes: int  # every layer's K and V at the cache length, float32
    peak_rss_bytes: int  # this process's peak resident set (export, reference and runs)
    prefill_tokens_per_second: float | None = json_field(digits=1)  # speed's median (LiteRT-LM CPU, timed by edge-export)
    decode_tokens_per_second: float | None = json_field(digits=1)
    speed: LlmSpeed | None = None  # the timed runs behind the two figures, with the host's load and threads


@dataclass(frozen=True)
class LanguageModelSection:
    task: str
    weights_format: str
    prefill_lengths: tuple[int, ...]
    cache_length: int
    max_new_tokens: int
    quantize: str  # as asked: none, fp16, dynamic-int8, int4 or auto
    block_size: int | None  # int4 only
    package: PackageMetadata
    litertlm: str
    chosen: str
    attempts: tuple[LlmRecipeAttempt, ...]
    measurements: LlmMeasurements
    sizing: LlmSizing | None = None  # where the prefill and cache lengths came from, and the memory estimate

    JSON_KEYS = (
        "task", "weights_format", "prefill_lengths", "cache_length", "max_new_tokens", "quantize", "block_size",
        "package", "litertlm", "chosen", "attempts", "measurements", "sizing", "passed",
    )

    @property
    def chosen_attempt(self) -> LlmRecipeAttempt:
        return next(a for a in self.attempts if a.recipe == self.chosen)

    @property
    def passed(self) -> bool:
        return self.chosen_attempt.passed


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}g}"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"


def _speed_basis(m: LlmMeasurements) -> str:
    """What the tokens/s are: the median of how many timed runs, on how many threads, at what load."""
    s = m.speed
    if s is None:
        return "LiteRT-LM CPU, not timed"
    load = "n/a" if s.host_load_average is None else f"{s.host_load_average:.1f}"
    return f"LiteRT-LM CPU, {s.threads} thread{'s' if s.threads != 1 else ''}, median of {s.runs} timed runs of {min(s.prompt_tokens, default=0)}-{max(s.prompt_tokens, default=0)} prompt tokens, host load {load} on {s.host_cpus or '?'} CPUs"


def markdown_lines(lm: LanguageModelSection, escape) -> list[str]:
    """The Markdown section; ``escape`` is the renderer's escaper for model text."""
    m, chosen = lm.measurements, lm.chosen_attempt
    lines = [
        "## Language model", "",
        f"- task: {lm.task}; weights: {lm.weights_format}; prefill lengths {', '.join(map(str, lm.prefill_lengths))}; cache {lm.cache_length} tokens"
        + ("" if lm.sizing is None else f" ({escape(lm.sizing.reason)})"),
        f"- recipe: {escape(lm.chosen)} (asked: {escape(lm.quantize)}{'' if lm.block_size is None else f', block size {lm.block_size}'})",
        f"- sizes: .tflite {_kib(m.tflite_bytes)}, .litertlm {_kib(m.litertlm_bytes)}, KV cache {_kib(m.kv_cache_bytes)} at {lm.cache_length} tokens",
        f"- host ({_speed_basis(m)}): prefill {_rate(m.prefill_tokens_per_second)} tokens/s, decode {_rate(m.decode_tokens_per_second)} tokens/s; peak RSS {_kib(m.peak_rss_bytes)}",
        f"- package: start token {lm.package.start_token_id}, stop tokens {list(lm.package.stop_token_ids)}, max {lm.package.max_num_tokens} tokens, "
        f"chat template {'yes (adapted: message content parts joined for the runtime)' if lm.package.chat_template else 'no'}, sampler {escape(lm.package.sampler or 'the runtime default')}",
        "", "| recipe | size | max abs Δlogit | mean KL | token agreement | identical texts | weights | result |", "|---|---|---|---|---|---|---|---|",
    ]
    for a in lm.attempts:
        weights = ", ".join(f"{w.group} {_kib(w.bytes)} {'/'.join(w.dtypes)}" for w in a.weights)
        texts = "n/a" if a.identical_texts is None else f"{a.identical_texts}/{len(a.prompts)}"
        lines.append(f"| {escape(a.recipe)} | {_kib(a.model_bytes)} | {_num(a.max_abs_logit_diff)} | {_num(a.mean_kl)} | {a.token_agreement:.3f} | {texts} | {weights} | {'passed' if a.passed else 'failed: ' + escape(attempt_shortfall(a))} |")
    lines += ["", f"Prompts ({escape(lm.chosen)}):", "", "| # | prompt | steps | max abs Δlogit | token agreement | first failing step | transformers | LiteRT-LM |", "|---|---|---|---|---|---|---|---|"]
    for i, p in enumerate(chosen.prompts):
        failing = "none" if p.first_failing_step is None else f"{p.first_failing_step}: {escape(p.failing_reason or '')}"
        lines.append(f"| {i} | {escape(p.prompt)} | {p.steps} | {_num(p.max_abs_logit_diff)} | {p.token_agreement:.3f} | {failing} | {escape(p.reference_text)} | {escape(p.runtime_text if p.runtime_text is not None else 'not run')} |")
    if chosen.chat is not None:
        c = chosen.chat
        lines += ["", f"Chat turn (LiteRT-LM Conversation API vs transformers' chat template): {'passed' if c.passed else 'failed'}"
                  + (f": {escape(c.failing_reason)}" if c.failing_reason else ""), "",
                  "| message | prompt tokens | transformers | LiteRT-LM |", "|---|---|---|---|",
                  f"| {escape(c.message)} | {c.prompt_tokens} | {escape(c.reference_text)} | {escape(c.runtime_text if c.runtime_text is not None else 'failed')} |"]
    return lines + [""]


def junit_cases(lm: LanguageModelSection) -> list[tuple[str, str, str | None, str]]:
    """(classname, name, failure or None, details): one case per prompt of the chosen recipe."""
    cases = []
    for i, p in enumerate(lm.chosen_attempt.prompts):
        details = (f"recipe {lm.chosen}; steps {p.steps}; max abs dlogit {_num(p.max_abs_logit_diff)}; mean KL {_num(p.mean_kl)}; "
                   f"token agreement {p.token_agreement:.3f}; transformers: {p.reference_text!r}; LiteRT-LM: {p.runtime_text!r}")
        failure = None if p.passed else f"step {p.first_failing_step}: {p.failing_reason}"
        cases.append(("edge_export.language_model.prompts", f"prompt {i}", failure, details))
    chat = lm.chosen_attempt.chat
    if chat is not None:
        details = f"recipe {lm.chosen}; transformers: {chat.reference_text!r}; LiteRT-LM Conversation: {chat.runtime_text!r}"
        cases.append(("edge_export.language_model.chat", "chat turn", None if chat.passed else chat.failing_reason, details))
    return cases


def attempt_shortfall(a: LlmRecipeAttempt) -> str:
    """What a failed attempt measured against its thresholds (why auto did not keep it)."""
    t, why = a.thresholds, []
    if not a.token_agreement >= t.min_token_agreement:
        why.append(f"token agreement {a.token_agreement:.3f} < {t.min_token_agreement:g}")
    if not a.mean_kl <= t.max_mean_kl:
        why.append(f"mean KL {_num(a.mean_kl)} > {t.max_mean_kl:g}")
    if t.max_abs_logit_diff is not None and not a.max_abs_logit_diff <= t.max_abs_logit_diff:
        why.append(f"max abs dlogit {_num(a.max_abs_logit_diff)} > {t.max_abs_logit_diff:g}")
    if a.chat is not None and not a.chat.passed:
        why.append("chat turn failed")
    return ", ".join(why) or "a prompt failed its check"


def summary_lines(lm: LanguageModelSection) -> list[str]:
    """Plain lines for the terminal summary (the caller escapes them)."""
    m, a = lm.measurements, lm.chosen_attempt
    lines = [
        f"language model: {lm.chosen} · .tflite {_kib(m.tflite_bytes)} · .litertlm {_kib(m.litertlm_bytes)} · KV cache {_kib(m.kv_cache_bytes)} at {lm.cache_length} tokens",
        f"parity ({len(a.prompts)} prompts x {lm.max_new_tokens} tokens, teacher-forced): max abs dlogit {_num(a.max_abs_logit_diff)}, mean KL {_num(a.mean_kl)}, "
        f"token agreement {a.token_agreement:.3f}; LiteRT-LM text identical on {a.identical_texts if a.identical_texts is not None else 'n/a'}/{len(a.prompts)}",
        f"host ({_speed_basis(m)}): prefill {_rate(m.prefill_tokens_per_second)} tokens/s, decode {_rate(m.decode_tokens_per_second)} tokens/s, peak RSS {_kib(m.peak_rss_bytes)}",
    ]
    if len(lm.attempts) > 1:
        lines.append("auto: " + "; ".join(f"{x.recipe} {_kib(x.model_bytes)} {'passed' if x.passed else 'failed: ' + attempt_shortfall(x)}" for x in lm.attempts))
    for i, p in enumerate(a.prompts):
        if not p.passed:
            lines.append(f"prompt {i} fails at step {p.first_failing_step}: {p.failing_reason}")
    if a.chat is not None:
        lines.append(f"chat turn (LiteRT-LM Conversation API): {'identical to transformers' if a.chat.passed else a.chat.failing_reason}")
    return lines


# Declared when this module is imported: before any report holds a LanguageModelSection.
LANGUAGE_MODEL_SECTION = register_run_section(RunSection(
    key="language_model", type=LanguageModelSection, markdown=lambda lm: markdown_lines(lm, escape_markdown),
    summary=summary_lines, junit=junit_cases,
))
