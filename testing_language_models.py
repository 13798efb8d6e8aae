"""Tiny random decoder language models for the tests and benchmarks of `edge_export.llm`.

Each is built from a transformers config (2 layers, hidden 64, random weights drawn from a fixed
seed), saved with ``save_pretrained`` (safetensors) beside a byte-level BPE tokenizer trained here
from a few sentences: nothing is downloaded. Shared by tests/llm/ and benchmarks/llm_export.py.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FAMILIES", "SENTENCES", "CHAT_TEMPLATE", "train_tokenizer", "build_decoder"]

SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "a small model runs on the phone without a network",
    "export the decoder and check every token against the reference",
    "hello world, this is a tiny language model",
    "one two three four five six seven eight nine ten",
    "the cache holds keys and values for every layer",
)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
VOCAB_SIZE = 192
FAMILIES = ("llama", "qwen3", "gemma3")


def train_tokenizer(vocab_size: int = VOCAB_SIZE, chat_template: str | None = CHAT_TEMPLATE, *, prepend_bos: bool = False):
    """A byte-level BPE tokenizer trained on ``SENTENCES`` (special tokens <pad>, <bos>, <eos>); its
    alphabet is the characters of those sentences, so the vocabulary stays small (``vocab_size``).
    ``prepend_bos``: the tokenizer adds <bos> to every text it encodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<bos>", "<eos>"],
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES, trainer)
    if prepend_bos:  # as Llama's and Gemma's tokenizers do: "<bos>" before every encoded text
        from tokenizers import processors

        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def _config(family: str, vocab: int, tokenizer):
    import transformers

    common = dict(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    if family == "llama":
        return transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    if family == "qwen3":
        return transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    if family == "gemma3":
        config = transformers.Gemma3TextConfig(**common, sliding_window=512, query_pre_attn_scalar=16)
        return config, transformers.Gemma3ForCausalLM
    raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")


def build_decoder(family: str, folder: Path, seed: int = 0, *, tokenizer=None) -> Path:
    """Save a tiny random ``family`` causal LM and its tokenizer in ``folder``; return it."""
    import torch

    tokenizer = tokenizer or train_tokenizer()
    config, model_class = _config(family, len(tokenizer), tokenizer)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():  # a random init's tiny weights make every logit ~equal: widen them
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder
