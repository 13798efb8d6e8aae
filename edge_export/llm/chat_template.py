"""The chat template as the LiteRT-LM runtime must see it.

LiteRT-LM's Conversation API hands the template every message's content as a list of parts,
``[{"type": "text", "text": ...}]``, where transformers hands it a string. A template written for
strings then prints the list literally (``<|user|>[{"type": "text", ...}]``) or fails in the
runtime (SmolLM2's ``'<|im_start|>' + message['role'] + '\\n' + message['content']``: "+ operator
on unsupported types string and sequence"). Measured on litert-lm-api 0.18.1.

So the packaged template starts with a prelude that rebuilds ``messages`` with each list content
joined into one string (its text parts, in order; other parts dropped: the package is text only),
and leaves string content alone; the user's template follows unchanged. A message whose content
is rebuilt keeps only ``role`` and ``content`` (Jinja cannot copy a mapping with one key changed).

The runtime also prepends the package's start token to every prompt itself; when the package
declares one, the prelude sets ``bos_token`` to the empty string, so a template that prints
``{{ bos_token }}`` (Llama, Gemma) does not make it two.
"""

from __future__ import annotations

__all__ = ["CONTENT_PARTS_PRELUDE", "EMPTY_BOS_PRELUDE", "runtime_chat_template"]

CONTENT_PARTS_PRELUDE = (
    "{#- edge-export: LiteRT-LM passes message content as a list of parts; join its text parts -#}"
    "{%- set _ee = namespace(messages=[]) -%}"
    "{%- for _ee_m in messages -%}"
    "{%- if _ee_m['content'] is string or _ee_m['content'] is none -%}"
    "{%- set _ee.messages = _ee.messages + [_ee_m] -%}"
    "{%- else -%}"
    "{%- set _ee_t = namespace(text='') -%}"
    "{%- for _ee_p in _ee_m['content'] -%}"
    "{%- if _ee_p['type'] == 'text' -%}{%- set _ee_t.text = _ee_t.text + _ee_p['text'] -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- set _ee.messages = _ee.messages + [{'role': _ee_m['role'], 'content': _ee_t.text}] -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- set messages = _ee.messages -%}"
)
EMPTY_BOS_PRELUDE = "{#- edge-export: the runtime prepends the start token itself -#}{%- set bos_token = '' -%}"


def runtime_chat_template(template: str, *, start_token_declared: bool) -> str:
    """``template`` with the preludes the runtime needs (see the module docstring)."""
    return CONTENT_PARTS_PRELUDE + (EMPTY_BOS_PRELUDE if start_token_declared else "") + template
