"""``edge-export inspect MODEL.litertlm``: what a checked package holds (litertlm_file.read_litertlm),
as tables or JSON. Text from the package (the template, token and signature names, metadata
values) is escaped for the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .litertlm_file import LitertlmPackage, read_litertlm

__all__ = ["describe_litertlm", "render_litertlm"]


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"


def _section_rows(package: LitertlmPackage) -> list[tuple[str, ...]]:
    return [(str(i), s.kind, _size(s.size), ", ".join(f"{k}={v}" for k, v in s.items) or "-") for i, s in enumerate(package.sections)]


def render_litertlm(package: LitertlmPackage, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..output.text_safety import for_terminal

    def show(text: object) -> str:
        return escape(for_terminal(text, keep_newlines=False))

    console.print(f"[bold]{show(package.path)}[/bold]: LiteRT-LM package, format {show(package.version)}, {_size(package.size)}")
    stops = ", ".join(" ".join(map(str, ids)) for ids in package.stop_token_ids) or "none"
    console.print(f"tokenizer: {show(package.tokenizer)}")
    console.print(f"start token: {' '.join(map(str, package.start_token_ids)) or 'none'}; stop tokens: {stops}; max tokens: {package.max_num_tokens}")
    console.print(f"chat template: {'yes (' + str(len(package.chat_template)) + ' characters)' if package.chat_template else 'no'}; sampler: {show(package.sampler or 'the runtime default')}")
    table = Table("#", "section", "size", "metadata", title="Sections")
    for row in _section_rows(package):
        table.add_row(*(show(cell) for cell in row))
    console.print(table)
    sigs = Table("signature", "inputs", "outputs", title="Signatures (the TFLite model)")
    for name, inputs, outputs in package.signatures:
        sigs.add_row(show(name), show(", ".join(inputs)), show(", ".join(outputs)))
    console.print(sigs)


def describe_litertlm(path: str | Path, console: Any, as_json: bool) -> LitertlmPackage:
    """Check ``path`` and print what it holds (exit 2 for a file that fails the check)."""
    package = read_litertlm(path)
    if as_json:
        import json

        from ..output.serialize import to_json_value

        console.print_json(json.dumps(to_json_value(package)))
    else:
        render_litertlm(package, console)
    return package
