"""The `edge-export` command: builds options, calls the Python API, maps errors to exit codes.

This is the only module that exits. It imports no torch or LiteRT at start-up, so `--help` is fast;
the API imports them when a command runs.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .cli_flags import CommandFlags, export_flag_classes, validate_flag_classes, with_generated_flags
from .cli_tools import add_tool_commands
from .errors import EXIT_INTERNAL, EXIT_USAGE, EdgeExportError, UsageError

EXIT_CODES_HELP = """Exit codes: 0 exported and parity passed; 1 exported but parity (or a
regression gate) failed, artifacts kept and the report says why; 2 bad usage or unreadable input,
nothing written; 3 tracing, quantization or conversion failed, nothing written; 4 internal error
(a bug: please report it with --debug output); 130 interrupted (Ctrl-C); 143 terminated
(SIGTERM). An interrupted run leaves no partial output.""".replace("\n", " ")  # one paragraph: rich help keeps line breaks

app = typer.Typer(
    name="edge-export",
    add_completion=False,
    no_args_is_help=True,
    # rich, for the help panels; every help text is escaped (cli_flags.py), so none is read as markup
    rich_markup_mode="rich",
    help=escape(
        "Export an unmodified PyTorch model to a LiteRT flatbuffer and prove on the host that it "
        "computes what PyTorch computes.\n\n"
        "Usage: edge-export MODEL [OPTIONS]  (same as `edge-export export MODEL`)\n\n"
        "MODEL is an ExportedProgram archive (.pt2), a TorchScript archive, a package.module:attr "
        "reference, or a pickled module (with --trust-pickle).\n\n" + EXIT_CODES_HELP
    ),
)

_out = Console(highlight=False, soft_wrap=True)  # --version only; commands print through a TerminalSession


def _version_callback(value: bool) -> None:
    """The version, the versions of the libraries that decide the result (read from their installed
    metadata: nothing is imported) and, when one is not the tested version, a warning."""
    if value:
        from .version import __version__
        from .constraints import check_pinned_set, library_versions

        versions = library_versions()
        _out.print(f"edge-export {__version__}", markup=False)
        for name, version in versions.items():
            _out.print(f"  {name:<18} {version or 'not installed'}", markup=False)
        warning = check_pinned_set(versions).warning()
        if warning:
            _out.print(f"warning: {warning}", markup=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
) -> None:
    """Group entry point (commands: export, validate, inspect, bench, constraints)."""


def _fail(exc: BaseException, debug: bool, err: Console) -> int:
    """Print one paragraph for a failed command and return its exit code."""
    if debug:
        err.print("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), markup=False)
    if isinstance(exc, EdgeExportError):
        err.print(f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True)
        if not debug:
            err.print("[dim](run with --debug for the full traceback)[/dim]")
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        what = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        err.print(f"[bold red]{what}[/bold red]: nothing was written.")
        return 143 if isinstance(exc, _Terminated) else 130
    code = getattr(exc, "exit_code", EXIT_INTERNAL)
    err.print(
        f"[bold red]internal error:[/bold red] {type(exc).__name__}: {escape(str(exc)[:500])} "
        "This is a bug in edge-export; please report it with the output of --debug.",
        markup=True,
    )
    return code


def _refuse_task_options(flags: list[str]) -> None:
    if flags:
        verb = "applies" if len(flags) == 1 else "apply"
        raise UsageError(
            f"{', '.join(flags)} {verb} to --task text-generation only, and MODEL is not a causal language model.",
            "Drop it, or pass --task text-generation with a Hugging Face causal-LM folder.",
        )


def _run(call, quiet: bool, debug: bool, verbose: bool = False) -> None:
    """Run an export or validate call with stage progress, print its summary or its error, and exit
    with its code. The only place that exits; the session owns the streams until the last line."""
    from .output.terminal import StageDisplay, TerminalSession

    with TerminalSession(capture=not verbose) as term:
        display = StageDisplay(term.err, quiet, spinner=not verbose)
        try:
            result = call(display.stage, display.progress)
        except (Exception, KeyboardInterrupt) as exc:  # the boundary: _fail maps every error to its exit code
            display.stop()
            code = _fail(exc, debug, term.err)
        else:
            _finish_uninterrupted()  # the artifacts are committed
            display.stop()
            if not quiet:
                _print_summary(result, term)
            code = result.exit_code
    raise typer.Exit(code)


def _print_summary(result: Any, term: Any) -> None:
    """The run's summary. A reader that closed the pipe early (``| head``) ends the summary, not
    the run: its artifacts are committed and its exit code stands (terminal.EscapingConsole raises
    BrokenPipeError where rich's console would exit 1, the code of a failed parity)."""
    from .reports.summary import print_summary

    try:
        print_summary(result.run_report, term.out, term.err)
    except BrokenPipeError:
        pass


@app.command("export", help=escape("Export MODEL to a LiteRT flatbuffer, check parity and write reports.\n\n" + EXIT_CODES_HELP))
@with_generated_flags("export", export_flag_classes)
def export_command(
    model: str = typer.Argument(..., help="Model: .pt2 ExportedProgram, TorchScript archive, package.module:attr, or pickled module."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Output .tflite path (default: <model stem>.tflite beside the model).", rich_help_panel="Outputs"),
    flags: CommandFlags = None,
) -> None:
    from .llm.command import TASK_OPTIONS, TASK_READS, text_generation_call, wants_text_generation

    given = flags.given()
    if wants_text_generation(model, flags["task"]):  # the language-model chain (edge_export/llm/pipeline.py)
        call = text_generation_call(
            model, output, flags["quantize"], flags["target"], flags["validate"], task=flags["task"],
            **{name: flags[name] for name in TASK_OPTIONS}, checking=flags.raw,
            not_for_the_task=[flag for name, flag in given if name not in TASK_READS],
        )
        return _run(call, flags["quiet"], flags["debug"], flags["verbose"])

    def call(on_stage, on_progress):
        from .api import export

        _refuse_task_options([flag for name, flag in given if name in TASK_OPTIONS])
        return export(model, output=output, options=flags.export_options(), on_stage=on_stage, on_progress=on_progress)

    _run(call, flags["quiet"], flags["debug"], flags["verbose"])


@app.command(
    "validate",
    help=escape("Check an existing MODEL.tflite against a PyTorch reference (any source kind export accepts), or "
    "against the test vectors --emit-test-vectors wrote (--test-vectors FILE: no PyTorch needed). "
    "Thresholds default to the flatbuffer's precision. Writes <stem>.validate.report.json/.md.\n\n" + EXIT_CODES_HELP),
)
@with_generated_flags("validate", validate_flag_classes)
def validate_command(
    tflite: Path = typer.Argument(..., help="The .tflite flatbuffer to check."),
    reference: Optional[str] = typer.Option(None, "--reference", "-r", help="The PyTorch model it was exported from (.pt2, TorchScript, package.module:attr, pickle).", rich_help_panel="Input"),
    test_vectors: Optional[Path] = typer.Option(None, "--test-vectors", help="Instead of --reference: a <stem>.testdata.npz from --emit-test-vectors; the model runs on its inputs and is judged against its outputs, kinds and thresholds (no PyTorch).", rich_help_panel="Input"),
    report: Optional[Path] = typer.Option(None, "--report", help="Report path prefix (default <tflite stem>.validate).", rich_help_panel="Outputs"),
    tensor_names: Optional[Path] = typer.Option(None, "--tensor-names", help="The tensor-name map of a stripped .tflite (default: <stem>.tensors.json beside it, which --target micro writes); --per-layer needs it.", rich_help_panel="Input"),
    flags: CommandFlags = None,
) -> None:
    def call(on_stage, on_progress):
        from .api import validate

        return validate(
            tflite, reference, test_vectors=test_vectors, report_prefix=report, options=flags.export_options(), on_stage=on_stage, tensor_names=tensor_names
        )

    _run(call, flags["quiet"], flags["debug"], flags["verbose"])


def _run_tool(call, debug: bool, verbose: bool = False, *, with_err: bool = False) -> None:
    """Run a command that prints its own result (inspect, bench) with ``call(out_console)``
    (``with_err``: ``call(out_console, err_console)``)."""
    from .output.terminal import TerminalSession

    with TerminalSession(capture=not verbose) as term:
        try:
            call(term.out, term.err) if with_err else call(term.out)
        except (Exception, KeyboardInterrupt) as exc:  # the boundary: _fail maps every error to its exit code
            code = _fail(exc, debug, term.err)
        else:
            code = 0
    raise typer.Exit(code)


add_tool_commands(app, _run_tool)

_COMMANDS = {"export", "validate", "inspect", "bench", "generate", "constraints"}


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: staged files are removed on the way out; exit 143."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated()


_owns_process = False  # main() run as the console script, not called by a host program or a test


def _finish_uninterrupted() -> None:
    """The command is over (its artifacts committed, or none written) and its exit code decided: a
    Ctrl-C or SIGTERM during the summary or the seconds of interpreter shutdown must not turn a
    finished run into "killed by a signal". Only when edge-export owns the process."""
    if not _owns_process:
        return
    import signal

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def main(argv: Optional[List[str]] = None) -> None:
    global _owns_process
    _owns_process = argv is None
    args = list(sys.argv[1:] if argv is None else argv)
    # `edge-export MODEL ...` is `edge-export export MODEL ...`.
    first = next((a for a in args if not a.startswith("-")), None)
    if args and first is not None and first not in _COMMANDS and args[0] not in ("--help", "-h"):
        args = ["export", *args]
        first = "export"
    if first == "export":  # the targets' options: only export needs them (importing the targets costs numpy)
        export_command.refresh_flags(True)
    import signal

    try:
        previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals to the host program
        previous_sigterm = None
    try:
        app(args=args, prog_name="edge-export", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if code is not None and not isinstance(code, int):
            code = EXIT_USAGE
        if argv is None:
            _finish_uninterrupted()
        sys.exit(code)
    finally:
        if previous_sigterm is not None and argv is not None:  # a host program calling main() gets its handler back
            signal.signal(signal.SIGTERM, previous_sigterm)


if __name__ == "__main__":
    main()
