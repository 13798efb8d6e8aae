"""The commands that print their own result (inspect, bench, generate, constraints), added to the
`edge-export` app by cli.py, which runs them (``run_tool``: errors to exit codes, the only exit)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from .cli_flags import RunFlags, tool_option
from .errors import UsageError
from .options import OutputOptions

__all__ = ["add_tool_commands"]

DebugOpt = tool_option(RunFlags, "debug")
VerboseOpt = tool_option(OutputOptions, "verbose")
_commands = typer.Typer()  # collects the commands; add_tool_commands moves them onto the app
_run_tool = None  # cli._run_tool, set by add_tool_commands


def add_tool_commands(app: typer.Typer, run_tool) -> None:
    global _run_tool
    _run_tool = run_tool
    app.registered_commands.extend(_commands.registered_commands)


@_commands.command(
    "inspect",
    help="Describe a .tflite file: signatures, inputs and outputs with dtypes, shapes and quantization, "
    "operator table, tensor count, size, whether it is fully integer, and the minimum runtime version. "
    "A .litertlm package: its sections, tokenizer, start and stop tokens, chat template, sampler, signatures and sizes. "
    "Exit code 2 when the file is not a valid LiteRT flatbuffer (or .litertlm package).",
)
def inspect_command(
    tflite: Path = typer.Argument(..., help="The .tflite flatbuffer or .litertlm package."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    debug: DebugOpt = False,
) -> None:
    def call(out: Console) -> None:
        import json

        from .inspection import inspect_flatbuffer, render_inspection
        from .llm.litertlm_file import is_litertlm_path
        from .output.serialize import to_json_value

        if is_litertlm_path(tflite):
            from .llm.litertlm_inspection import describe_litertlm

            describe_litertlm(tflite, out, as_json)
            return
        report = inspect_flatbuffer(tflite)
        if as_json:
            out.print_json(json.dumps(to_json_value(report)))
        else:
            render_inspection(report, out)

    _run_tool(call, debug)


@_commands.command(
    "bench",
    help="Host latency of a .tflite file with LiteRT on CPU, with and without XNNPACK: median and spread "
    "after warm-up, on random inputs. Exit code 2 when the file is not a valid LiteRT flatbuffer.",
)
def bench_command(
    tflite: Path = typer.Argument(..., help="The .tflite flatbuffer."),
    threads: int = typer.Option(1, "--threads", help="Interpreter threads."),
    runs: int = typer.Option(50, "--runs", help="Timed runs per runtime."),
    warmup: int = typer.Option(5, "--warmup", help="Untimed runs first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    verbose: VerboseOpt = False,
    debug: DebugOpt = False,
) -> None:
    def call(out: Console) -> None:
        import json

        from .flatbuffer import load_flatbuffer
        from .runtime.latency import benchmark_latency, render_latency
        from .llm.litertlm_file import is_litertlm_path
        from .output.serialize import to_json_value

        if is_litertlm_path(tflite):
            raise UsageError(f"{tflite} is a LiteRT-LM package: bench times a .tflite's single invocation, not a language model's prefill and decode.",
                             f"Run edge-export generate {tflite} \"a prompt\" (it prints decode and prefill tokens/s), or bench the .tflite an export with --write-tflite writes beside it.")
        report = benchmark_latency(load_flatbuffer(tflite), threads=threads, runs=runs, warmup=warmup)
        if as_json:
            out.print_json(json.dumps(to_json_value(report)))
        else:
            render_latency(report, out)

    _run_tool(call, debug, verbose)


@_commands.command(
    "constraints",
    help="Print the pinned set of libraries this edge-export was tested with (pip's constraints-file format), "
    "to reproduce the tested environment elsewhere: pip install edge-export -c <(edge-export constraints).",
)
def constraints_command() -> None:
    from .constraints import constraints_text

    sys.stdout.write(constraints_text())  # verbatim: pip reads it, so no console markup or wrapping


@_commands.command(
    "generate",
    help="Generate text from an exported .litertlm with the LiteRT-LM runtime (CPU), streaming it to stdout as it "
    "is decoded; tokens/s go to stderr. Greedy unless --sample. The package is checked before the runtime opens it. "
    "Exit code 2 for a missing or invalid file or bad usage, 3 when the runtime fails.",
)
def generate_command(
    model: Path = typer.Argument(..., help="The .litertlm package (edge-export writes it beside the .tflite)."),
    prompt: str = typer.Argument(..., help="The prompt: raw text, or with --chat the user's message."),
    chat: bool = typer.Option(False, "--chat", help="Send the prompt as one user turn through the Conversation API and the packaged chat template."),
    max_tokens: int = typer.Option(64, "--max-tokens", help="The most tokens to generate."),
    sample: bool = typer.Option(False, "--sample", help="Use the package's sampler defaults instead of greedy (top-k 1)."),
    verbose: VerboseOpt = False,
    debug: DebugOpt = False,
) -> None:
    def call(out: Console, err: Console) -> None:
        from .llm.generate_command import run_generate

        run_generate(model, prompt, out, err, chat=chat, max_tokens=max_tokens, sample=sample)

    _run_tool(call, debug, verbose, with_err=True)
