"""The flags of ``edge-export export`` and ``validate``, generated from the options' declarations.

Every option is declared once, as a dataclass field with its flag (option_fields.option): the
groups of ExportOptions, each target's options class, the language-model task's flags and the run's
own (--quiet, --debug). ``with_generated_flags`` gives a command one typer parameter per field that
declares that command, in its help panel, and calls it with ``flags``: the values typer parsed, by
field name. Help texts are escaped: the help renders in rich panels, but a text's square brackets
(``[NAME=]FILE``, ``edge-export[plot]``) are printed as written, never read as markup.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Optional

import typer
from rich.markup import escape

from .option_fields import BOTH, cli_default, flagged_fields, option

__all__ = ["RunFlags", "CommandFlags", "with_generated_flags", "tool_option", "export_flag_classes", "validate_flag_classes"]


@dataclass(frozen=True)
class RunFlags:
    """How a command talks: read by the CLI only (ExportOptions.outputs.verbose is the libraries')."""

    quiet: bool = option(False, "--quiet", help="Print only errors.", panel="Outputs", cli_type=bool, commands=BOTH)
    debug: bool = option(False, "--debug", help="Show full tracebacks.", panel="Outputs", cli_type=bool, commands=BOTH)


def _option_groups() -> list[type]:
    from .options import GROUPS, ExportOptions

    return [*GROUPS.values(), ExportOptions, RunFlags]


def export_flag_classes(with_targets: bool) -> list[type]:
    """The classes whose fields are export's flags; the targets' only when asked (discovering
    them imports every target, numpy among their imports: only ``export`` pays for it)."""
    from .llm.command import TextGenerationFlags

    targets: list[type] = []
    if with_targets:
        from .targets.registry import target_options_classes

        targets = target_options_classes()
    return [*_option_groups(), *targets, TextGenerationFlags]


def validate_flag_classes(with_targets: bool = False) -> list[type]:
    return _option_groups()


def _parameter(f: dataclasses.Field, flag: Any, command: str) -> inspect.Parameter:
    extra = {"metavar": flag.metavar} if flag.metavar else {}
    info = typer.Option(cli_default(f, flag), *flag.decls, help=escape(flag.help), rich_help_panel=flag.panel, **extra)
    annotation = flag.cli_type if flag.cli_type is not None else Optional[str]
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


def tool_option(cls: type, name: str) -> Any:
    """One declared flag for another command (``--debug`` of inspect), without its panel."""
    f, flag = next((f, flag) for f, flag in flagged_fields(cls) if f.name == name)
    return Annotated[flag.cli_type, typer.Option(*flag.decls, help=escape(flag.help))]


@dataclass(frozen=True)
class CommandFlags:
    """What typer parsed for the generated flags of one command, by field name."""

    command: str
    raw: dict[str, Any]
    classes: tuple[type, ...]

    def __getitem__(self, name: str) -> Any:
        return self.raw[name]

    def _declared(self, classes: Iterable[type]) -> Iterable[tuple[dataclasses.Field, Any]]:
        for cls in classes:
            yield from ((f, flag) for f, flag in flagged_fields(cls, self.command) if f.name in self.raw)

    def given(self) -> list[tuple[str, str]]:
        """(field, flag) of every flag given a value other than its default."""
        return [(f.name, flag.name) for f, flag in self._declared(self.classes) if self.raw[f.name] != cli_default(f, flag)]

    def values(self, classes: Iterable[type], only_given: bool = False) -> dict[str, Any]:
        """The fields of ``classes`` as their dataclass takes them (each flag's ``parse``: a value
        that does not parse is a UsageError, exit 2). ``only_given``: the flags left out are not
        passed (a target's option given with another target is refused, so none is by default)."""
        out = {}
        for f, flag in self._declared(classes):
            value = self.raw[f.name]
            if only_given and value == cli_default(f, flag):
                continue
            out[f.name] = flag.parse(value) if flag.parse is not None else value
        return out

    def export_options(self) -> Any:
        """ExportOptions from these flags (the targets' options: those given)."""
        from .options import ExportOptions
        from .targets.registry import TargetOptions

        targets = [c for c in self.classes if issubclass(c, TargetOptions)]
        return ExportOptions.from_keywords(**self.values(_option_groups()[:-1]), **self.values(targets, only_given=True))


def with_generated_flags(command: str, classes: Callable[[bool], list[type]]) -> Callable[[Callable], Any]:
    """Give a typer command the flags of ``classes`` that declare ``command``; it is called with
    its own parameters and ``flags`` (a CommandFlags). ``refresh_flags(True)`` rebuilds the
    signature typer reads with the targets' options (cli.main calls it before ``export`` runs,
    so a target registered after this module was imported has its flags too)."""

    def wrap(function: Callable) -> Any:
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in inspect.signature(function).parameters.values() if p.name != "flags"]
        own_names = {p.name for p in own}
        current: list[tuple[type, ...]] = [()]

        @functools.wraps(function)
        def run(**values: Any) -> Any:
            raw = {k: v for k, v in values.items() if k not in own_names}
            return function(**{k: values[k] for k in own_names}, flags=CommandFlags(command, raw, current[0]))

        def refresh_flags(with_targets: bool = False) -> None:
            current[0] = tuple(classes(with_targets))
            generated = [_parameter(f, flag, command) for cls in current[0] for f, flag in flagged_fields(cls, command)]
            params = [*generated, *own]
            run.__signature__ = inspect.Signature(params)
            run.__annotations__ = {p.name: p.annotation for p in params}

        run.refresh_flags = refresh_flags
        refresh_flags(False)
        return run

    return wrap
