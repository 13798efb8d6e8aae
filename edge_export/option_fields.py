"""How an option field declares its command-line flag: ``option(default, "--flag", help=..., panel=...)``
is a ``dataclasses.field`` whose metadata holds a ``Flag``. The options groups (options.py), every
target's options class and the language-model task's flags are declared this way, once; the CLI
(cli_flags.py) builds the typer parameters of ``export`` and ``validate`` from these declarations.

This module imports no typer and no heavy library: the Python API reads the same fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Mapping, Optional

from .config import parse_shape
from .errors import UsageError

__all__ = ["Flag", "option", "flag_of", "flagged_fields", "EXPORT", "VALIDATE", "BOTH"]

EXPORT = ("export",)
VALIDATE = ("validate",)
BOTH = ("export", "validate")
_FIELD_DEFAULT = object()  # the CLI default is the field's own default


@dataclass(frozen=True)
class Flag:
    """One option's command-line declaration. ``cli_type`` is what typer parses (``Optional[str]``,
    an enum, ``bool``...); ``parse`` turns that value into the field's (raising UsageError: exit 2)."""

    decls: tuple[str, ...]  # "--quantize", "-q"; a bool switch as "--validate/--no-validate"
    help: str
    panel: str  # the --help panel (typer's rich_help_panel)
    cli_type: Any = None  # None: Optional[str]
    cli_default: Any = _FIELD_DEFAULT
    parse: Callable[[Any], Any] | None = None
    metavar: str | None = None
    commands: tuple[str, ...] = EXPORT
    # What differs in one command's flag, e.g. {"validate": {"help": ..., "decls": ("--channels-last",)}}
    per_command: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def for_command(self, command: str) -> Flag:
        return dataclasses.replace(self, **self.per_command.get(command, {})) if command in self.per_command else self

    @property
    def name(self) -> str:
        """The flag errors name: "--channels-last" (the first long declaration, without its negation)."""
        return next(d for d in self.decls if d.startswith("--")).split("/")[0]


def option(default: Any = None, *decls: str, help: str, panel: str, **flag: Any) -> Any:
    """A dataclass field with its flag: ``quantize: QuantizeMode = option(QuantizeMode.NONE, "--quantize", "-q", ...)``."""
    return field(default=default, metadata={"cli": Flag(tuple(decls), help, panel, **flag)})


def flag_of(f: dataclasses.Field) -> Flag | None:
    return f.metadata.get("cli")


def flagged_fields(cls: type, command: str | None = None) -> Iterator[tuple[dataclasses.Field, Flag]]:
    """The fields of ``cls`` with a flag (of ``command``, when given), in declaration order."""
    for f in dataclasses.fields(cls):
        flag = flag_of(f)
        if flag is not None and (command is None or command in flag.commands):
            yield f, (flag.for_command(command) if command else flag)


def cli_default(f: dataclasses.Field, flag: Flag) -> Any:
    return f.default if flag.cli_default is _FIELD_DEFAULT else flag.cli_default


# ---- parsers of command-line strings (each a UsageError, exit 2, when the text does not parse) ----

ListOfStr = Optional[List[str]]


def parse_shapes(values: list[str] | None) -> tuple[tuple[int, ...], ...]:
    return tuple(parse_shape(v) for v in (values or []))


def as_tuple(values: list[str] | None) -> tuple[str, ...]:
    return tuple(values or ())


def path_text(value: Any) -> str | None:
    return str(value) if value else None


def floats(option: str) -> Callable[[str | None], tuple[float, ...] | None]:
    def parse(text: str | None) -> tuple[float, ...] | None:
        if text is None:
            return None
        try:
            values = tuple(float(v) for v in text.replace(" ", "").split(",") if v)
        except ValueError:
            values = ()
        if not values:
            raise UsageError(f"Cannot read {option} '{text}'.", f"Write comma-separated numbers, e.g. {option} 0.5,0.5,0.5.")
        return values

    return parse


def height_width(option: str) -> Callable[[str | None], tuple[int, int] | None]:
    def parse(text: str | None) -> tuple[int, int] | None:
        if text is None:
            return None
        shape = parse_shape(text)
        if len(shape) != 2:
            raise UsageError(f"{option} '{text}' must be two numbers, height and width, e.g. {option} 224,224.")
        return (shape[0], shape[1])

    return parse
