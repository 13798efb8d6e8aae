"""Operator coverage: which PyTorch operators edge-export turns into models that run, where, and how well.

    nice .venv/bin/python benchmarks/op_coverage.py                      # every case, both modes
    .venv/bin/python benchmarks/op_coverage.py --cases topk,gru --modes int8
    .venv/bin/python benchmarks/op_coverage.py --render-only             # docs/OPERATORS.md from the JSON

Each case of ``op_coverage_cases.CASES`` (a one-operator model built in code) is exported through
``edge_export.export`` (target cpu) in fp32 and with ``quantize="int8"``, then the written file is
checked for each target without running another export:

- cpu: did it convert, did LiteRT run it (the export's parity check runs it), parity's verdict and
  worst SQNR, and for int8 which operators still compute in float (read from the file: any
  operator with a float32 activation, except the QUANTIZE/DEQUANTIZE at float model I/O) and what
  each quantization backend gave;
- Edge TPU (int8): the static mapping prediction (``targets/edgetpu.check_edgetpu``; the compiler is
  not installed here), on the cpu export, so without the Edge TPU target's module rewrites;
- GPU (fp32): the delegate prediction (``targets/gpu.check_gpu``): operators and partitions;
- micro: the TFLite Micro host interpreter loads and runs the file (``targets/micro.MicroRunner``,
  in a forked child), with the SQNR of its output against PyTorch.

Every case runs in its own Python process with a timeout per mode, so a crash or a hang costs that
case only: the child writes one JSON file per mode as it finishes it, and the parent records a mode
that never finished as ``timeout`` or ``crash`` and starts a new child for the modes after it. The
results go to ``benchmarks/results/op_coverage.json``; ``docs/OPERATORS.md`` is generated from them
(``render_markdown``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results" / "op_coverage.json"
DEFAULT_MARKDOWN = ROOT / "docs" / "OPERATORS.md"
MODES = ("fp32", "int8")
_QUANTIZE = {"fp32": "none", "int8": "int8"}

# How an error class reads in the table: did the model convert, and did it run.
_NOT_CONVERTED = {"TraceError", "ConversionError"}
_NOT_RUN = {"RuntimeRunError", "NativeCrashError", "FlatbufferError"}
# int8: every backend failed because LiteRT could not run the float model or a candidate
_NOT_RUN_TEXT = ("could not load the model", "failed to run the model", "Didn't find op")


# int8: the quantization backends failed because the graph did not convert
_NOT_CONVERTED_TEXT = ("Converting the traced graph to LiteRT failed", "torch.export failed")


def does_not_convert(r: dict) -> bool:
    if r["status"] != "error":
        return False
    return r["error_class"] in _NOT_CONVERTED or (r["error_class"] == "QuantizationError" and any(t in r["error"] for t in _NOT_CONVERTED_TEXT))


def does_not_run(r: dict) -> bool:
    """The model converted, but LiteRT could not load or run it."""
    if r["status"] != "error":
        return False
    return r["error_class"] in _NOT_RUN or (r["error_class"] == "QuantizationError" and any(t in r["error"] for t in _NOT_RUN_TEXT))


# ---- one case, in the child process ---------------------------------------------------------------


def _worst(validation: dict) -> tuple[float | None, str | None]:
    worst = validation.get("worst") or {}
    return worst.get("sqnr_db"), worst.get("kind")


def float_operators(model: Any) -> list[str]:
    """Opcodes that compute in float in an int8 model (``FlatbufferModel.float_operators``: a float
    activation in or out, except the QUANTIZE of a float model input and the DEQUANTIZE of a float
    model output)."""
    return list(dict.fromkeys(op.opcode for op in model.float_operators))


def _attempts(report: dict) -> list[str]:
    """Each quantization backend's result in a few words (why an operator stayed float)."""
    lines = []
    for a in (report.get("quantization") or {}).get("attempts", []):
        if not a.get("ok"):
            lines.append(f"{a['backend']}: failed ({(a.get('error') or '').splitlines()[0][:160]})")
        else:
            sqnr = a.get("sqnr_db")
            lines.append(
                f"{a['backend']}: {'fully integer' if a.get('fully_integer') else 'float operators left'}"
                + (f", {sqnr:.1f} dB" if isinstance(sqnr, (int, float)) else "")
            )
    return lines


def _micro(model: Any, example: Sequence[Any], reference: Sequence[Any]) -> dict:
    from edge_export.errors import EdgeExportError, first_line
    from edge_export.processes.isolation import run_isolated
    from edge_export.targets.micro.target import MicroRunner
    from edge_export.validators.metrics import sqnr_db

    def run():
        return MicroRunner(model).run([e.numpy() for e in example])

    try:
        outs = run_isolated(run, stage="op coverage micro run", backend="the TFLite Micro interpreter")
    except EdgeExportError as exc:
        return {"runs": False, "error": first_line(exc)}
    except Exception as exc:  # noqa: BLE001 - any failure of the interpreter is the cell's content
        return {"runs": False, "error": first_line(exc, with_type=True)}
    worst = min((sqnr_db(r, o.reshape(r.shape)) for r, o in zip(reference, outs)), default=None)
    return {"runs": True, "sqnr_db": None if worst is None else float(worst)}


def _targets(result: dict, model: Any, mode: str, example: Sequence[Any], reference: Sequence[Any]) -> None:
    if mode == "int8":
        from edge_export.targets.edgetpu.checks import check_edgetpu

        tpu = check_edgetpu(model)
        cut = tpu.first_unmapped
        result["edgetpu"] = {
            "on_tpu": tpu.num_on_tpu,
            "ops": tpu.num_ops,
            "fully_mapped": tpu.fully_mapped,
            "problems": list(tpu.model_problems),
            "first_unmapped": None if cut is None else f"{cut.opcode}: {cut.reason}",
        }
    else:
        from edge_export.targets.gpu.target import GpuTarget, check_gpu

        gpu_model = GpuTarget().rewrite_flatbuffer(model).model  # what --target gpu predicts on
        gpu = check_gpu(gpu_model)
        result["gpu_ops"] = [op.opcode for op in gpu_model.operators]
        first = gpu.first_unsupported
        result["gpu"] = {
            "on_gpu": gpu.num_on_gpu,
            "ops": gpu.num_ops,
            "partitions": gpu.num_partitions,
            "fully_delegated": gpu.fully_delegated,
            "first_unsupported": None if first is None else f"{first.opcode}: {first.reason}",
        }
    result["micro"] = _micro(model, example, reference)


def _litert_torch_ops(module: Any, example: Sequence[Any]) -> list[str] | str:
    """The operators litert-torch alone writes for the case (no edge-export pass), or its error."""
    import litert_torch

    from edge_export.errors import first_line
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.processes.library_output import quiet_libraries

    try:
        with quiet_libraries():
            data = bytes(litert_torch.convert(module, tuple(example)).model_content())
        return [op.opcode for op in read_flatbuffer(data).operators]
    except Exception as exc:  # noqa: BLE001 - the failure is the cell's content
        return f"fails: {first_line(exc, with_type=True)}"


def run_case(name: str, mode: str, workdir: Path) -> dict:
    """Export case ``name`` in ``mode`` and check the file for every target (in this process)."""
    import torch

    import edge_export
    from edge_export.errors import EdgeExportError, InternalError, first_line
    from edge_export.flatbuffer import load_flatbuffer
    from op_coverage_cases import CASES, build_case

    module, example = build_case(name)
    with torch.no_grad():
        out = module(*example)
    reference = [t.detach().float().numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]
    result: dict[str, Any] = {"case": name, "family": CASES[name][0], "mode": mode}
    start = time.perf_counter()
    try:
        exported = edge_export.export(
            module, example_inputs=example, output=workdir / f"{name}_{mode}.tflite", quantize=_QUANTIZE[mode],
            samples=4, calibration_samples=16, host_latency=False, quiet_libraries=True,
        )
    except EdgeExportError as exc:
        result.update(status="error", exit_code=exc.exit_code, error_class=type(exc).__name__, error=first_line(exc))
    except InternalError as exc:
        result.update(status="error", exit_code=4, error_class="InternalError", error=first_line(exc))
    except Exception as exc:  # noqa: BLE001 - what the CLI reports as exit 4 (a bug)
        result.update(status="error", exit_code=4, error_class=type(exc).__name__, error=first_line(exc, with_type=True))
    else:
        report = exported.report
        sqnr, kind = _worst(report["validation"])
        model = load_flatbuffer(exported.tflite_path)
        result.update(
            status="passed" if exported.exit_code == 0 else "parity-failed",
            exit_code=exported.exit_code,
            sqnr_db=sqnr,
            kind=kind,
            op_counts=report["flatbuffer"]["op_counts"],
        )
        if mode == "int8":
            result.update(
                float_ops=float_operators(model),
                integer_check_fully_integer=report["quantization"]["fully_integer"],
                backend=report["quantization"]["backend"],
                attempts=_attempts(report),
            )
        if mode == "fp32":
            result.update(ops=[op.opcode for op in model.operators], litert_torch_ops=_litert_torch_ops(module, example))
        _targets(result, model, mode, example, reference)
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def _child_main(names: Sequence[str], modes: Sequence[str], results_dir: Path, workdir: Path) -> None:
    for name in names:
        for mode in modes:
            (results_dir / f"{name}.{mode}.started").write_text("")
            result = run_case(name, mode, workdir)
            (results_dir / f"{name}.{mode}.json").write_text(json.dumps(result))


# ---- the sweep, in the parent -----------------------------------------------------------------------


def _child_command(name: str, modes: Sequence[str], results_dir: Path, workdir: Path) -> list[str]:
    return [
        sys.executable, str(Path(__file__).resolve()), "--child", name, "--modes", ",".join(modes),
        "--results-dir", str(results_dir), "--workdir", str(workdir),
    ]


def sweep_case(name: str, modes: Sequence[str], *, timeout: float, results_dir: Path, workdir: Path) -> list[dict]:
    """Every mode of one case, each child bounded by ``timeout`` seconds per mode it still has to
    run; a mode whose child hung or died is recorded as such and the next mode gets a new child."""
    from op_coverage_cases import CASES

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(HERE), os.environ.get("PYTHONPATH")]))}
    results: list[dict] = []
    pending = list(modes)
    while pending:
        for mode in pending:
            (results_dir / f"{name}.{mode}.started").unlink(missing_ok=True)
        log = results_dir / f"{name}.log"
        with log.open("ab") as sink:
            try:
                proc = subprocess.run(_child_command(name, pending, results_dir, workdir), stdout=sink, stderr=sink, env=env, timeout=timeout * len(pending))
                ending = None if proc.returncode == 0 else f"the child process ended with code {proc.returncode}"
                status = "crash"
            except subprocess.TimeoutExpired:
                ending, status = f"no result within {timeout * len(pending):.0f} s", "timeout"
        finished = [m for m in pending if (results_dir / f"{name}.{m}.json").exists()]
        results += [json.loads((results_dir / f"{name}.{m}.json").read_text()) for m in finished]
        rest = [m for m in pending if m not in finished]
        if not rest:
            break
        stuck = next((m for m in rest if (results_dir / f"{name}.{m}.started").exists()), rest[0])
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        results.append({
            "case": name, "family": CASES[name][0], "mode": stuck, "status": status, "exit_code": None,
            "error_class": status, "error": (ending or "the child stopped early") + (f"; last output: {tail[0][:200]}" if tail else ""),
        })
        pending = rest[rest.index(stuck) + 1:]
    return results


def sweep(names: Sequence[str], modes: Sequence[str], *, timeout: float, progress: bool = True) -> list[dict]:
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="op_coverage_") as tmp:
        results_dir, workdir = Path(tmp) / "results", Path(tmp) / "models"
        results_dir.mkdir()
        workdir.mkdir()
        for number, name in enumerate(names, 1):
            found = sweep_case(name, modes, timeout=timeout, results_dir=results_dir, workdir=workdir)
            results += found
            if progress:
                states = ", ".join(f"{r['mode']} {r['status']}" for r in found)
                print(f"[{number}/{len(names)}] {name}: {states}", flush=True)
    return results


# ---- the table ---------------------------------------------------------------------------------------


def _relative(text: str) -> str:
    """An absolute path into the swept tree as the repository's own (``benchmarks/...``)."""
    import re

    return re.sub(r"(?<![\w.])/\S*?/(benchmarks/)", r"\1", text)


def _md(text: Any) -> str:
    """Model-derived text in a Markdown table cell (converter and interpreter messages)."""
    return _relative(str(text)).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace("`", "'")


def _cpu_cell(r: dict) -> str:
    if r["status"] in ("timeout", "crash"):
        return f"**{r['status']}**"
    if r["status"] == "error":
        what = "no convert" if does_not_convert(r) else "no run" if does_not_run(r) else "fails"
        return f"**{what}** (exit {r['exit_code']})"
    sqnr = r.get("sqnr_db")
    level = f"{sqnr:.0f} dB" if isinstance(sqnr, (int, float)) else "n/a"
    return f"ok, {level}" if r["status"] == "passed" else f"**parity fails**, {level}"


def _integer_cell(r: dict) -> str:
    if "float_ops" not in r:
        return "–"
    if not r["float_ops"]:
        return "yes"
    return "no: float " + ", ".join(r["float_ops"])


def _tpu_cell(r: dict) -> str:
    tpu = r.get("edgetpu")
    if not tpu:
        return "–"
    if tpu["fully_mapped"]:
        return f"all {tpu['ops']}"
    cut = (tpu["first_unmapped"] or "").split(":")[0] or (tpu["problems"][0] if tpu["problems"] else "?")
    return f"{tpu['on_tpu']}/{tpu['ops']}, cut at {_md(cut)}"


def _gpu_cell(r: dict) -> str:
    gpu = r.get("gpu")
    if not gpu:
        return "–"
    if gpu["fully_delegated"]:
        return f"all {gpu['ops']}"
    first = (gpu["first_unsupported"] or "").split(":")[0]
    return f"{gpu['on_gpu']}/{gpu['ops']}, {gpu['partitions']} part." + (f", CPU: {_md(first)}" if first else "")


def _micro_cell(r: dict) -> str:
    micro = r.get("micro")
    if not micro:
        return "–"
    if not micro["runs"]:
        return "**no**"
    sqnr = micro.get("sqnr_db")
    return f"runs, {sqnr:.0f} dB" if isinstance(sqnr, (int, float)) and sqnr == sqnr else "runs"


def _by_case(results: Sequence[dict]) -> dict[str, dict[str, dict]]:
    table: dict[str, dict[str, dict]] = {}
    for r in results:
        table.setdefault(r["case"], {})[r["mode"]] = r
    return table


def failures(results: Sequence[dict]) -> dict[str, list[str]]:
    """The lists the issue asks to track: converted but not run, exit 4, float left in int8, and the
    other failures (each "case (mode): reason")."""
    found: dict[str, list[str]] = {"converts_but_does_not_run": [], "exit_4": [], "stays_float_in_int8": [], "other": []}
    for r in results:
        label = f"{r['case']} ({r['mode']})"
        if does_not_run(r):
            found["converts_but_does_not_run"].append(f"{label}: {r['error']}")
        elif r["status"] == "error" and r["exit_code"] == 4:
            found["exit_4"].append(f"{label}: {r['error']}")
        elif r["status"] in ("error", "timeout", "crash", "parity-failed"):
            reason = r.get("error") or f"parity fails, worst SQNR {r.get('sqnr_db')} dB"
            found["other"].append(f"{label}: {reason}")
        if r.get("float_ops"):
            found["stays_float_in_int8"].append(f"{r['case']}: float {', '.join(r['float_ops'])} ({'; '.join(r.get('attempts', []))})")
    return found


def _tally(results: Sequence[dict], mode: str) -> str:
    mine = [r for r in results if r["mode"] == mode]
    counts = {
        "passed": sum(r["status"] == "passed" for r in mine),
        "parity fails": sum(r["status"] == "parity-failed" for r in mine),
        "no convert": sum(does_not_convert(r) for r in mine),
        "no run": sum(does_not_run(r) for r in mine),
        "exit 4": sum(r["status"] == "error" and r["exit_code"] == 4 for r in mine),
        "timeout or crash": sum(r["status"] in ("timeout", "crash") for r in mine),
    }
    counts["other errors"] = len(mine) - sum(counts.values())
    return f"{mode}: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v or k == "passed")


def _op_list(ops: Sequence[str] | str) -> str:
    """``RELU, MUL x2, SUB``: operators in graph order, repeats next to each other counted."""
    if isinstance(ops, str):
        return _md(ops)
    runs: list[list] = []
    for op in ops:
        if runs and runs[-1][0] == op:
            runs[-1][1] += 1
        else:
            runs.append([op, 1])
    return ", ".join(op if n == 1 else f"{op} x{n}" for op, n in runs) or "nothing"


def _lowering_section(results: Sequence[dict]) -> list[str]:
    """The fp32 cases whose operators edge-export's passes change: litert-torch's lowering, then the file's."""
    changed = [
        r for r in results
        if r["mode"] == "fp32" and "ops" in r and (r.get("litert_torch_ops") not in (None, r["ops"]) or r.get("gpu_ops") not in (None, r["ops"]))
    ]
    lines = [
        f"## Lowerings edge-export's passes change ({len(changed)})", "",
        "fp32: the operators litert-torch writes for the case by itself, then those of the file edge-export",
        "writes (its FX passes before conversion, its flatbuffer passes after), and where `--target gpu`'s",
        "own flatbuffer pass changes more, the model the GPU column predicts on. Rows swept before",
        "2026-12-03 recorded no operators and are not listed: a full sweep lists every case.", "",
    ]
    for r in changed:
        gpu = r.get("gpu_ops")
        extra = f"; `--target gpu`: {_op_list(gpu)}" if gpu and gpu != r["ops"] else ""
        lines.append(f"- `{_md(r['case'])}`: litert-torch: {_op_list(r['litert_torch_ops'])}; edge-export: {_op_list(r['ops'])}{extra}")
    return lines + ([] if changed else ["None."]) + [""]


def render_markdown(results: Sequence[dict], *, command: str, date: str, seconds: float | None = None, reruns: Sequence[dict] = ()) -> str:
    table = _by_case(results)
    took = f" ({seconds / 60:.0f} min, one process per operator, on a shared 2-core machine)" if seconds else ""
    again = "".join(f" Rerun on {r['date']} with `{r['command']}` (those cases' rows replaced)." for r in reruns)
    lines = [
        "# Operator coverage",
        "",
        f"Generated by `benchmarks/op_coverage.py` on {date} with `{command}`{took}; do not edit by hand:",
        "`--render-only` rebuilds it from `benchmarks/results/op_coverage.json`." + again,
        "",
        "Each row is a one-operator model (`benchmarks/op_coverage_cases.py`) exported through",
        "`edge_export.export` (target cpu) in fp32 and with `--quantize int8`. Columns:",
        "",
        "- **cpu**: `ok, N dB` exported, run by LiteRT and passed parity (worst output SQNR against",
        "  PyTorch); `no convert` (torch.export or the converter failed), `no run` (converted, but LiteRT",
        "  could not load or run it), `fails` (another error), with the exit code the CLI would give;",
        "  `parity fails` exported but outside the thresholds (exit 1); `timeout`/`crash` of the sweep's child.",
        "- **int8 integer**: `yes` when every operator computes in int8 (read from the file), otherwise the",
        "  operators that read or write a float32 activation, in graph order (the QUANTIZE of a float model",
        "  input and the DEQUANTIZE of a float output excepted; a CAST of an integer result to a float output counts).",
        "- **Edge TPU** (int8): the static mapping prediction, operators on the TPU / all, and where the",
        "  compiler would cut (the compiler is not installed here; the cpu export, without the Edge TPU",
        "  target's module rewrites).",
        "- **GPU** (fp32; `--target gpu` refuses int8): operators predicted on the delegate / all, the",
        "  number of partitions and the first operator left on the CPU (after `--target gpu`'s own",
        "  flatbuffer pass, `reshape_operands_to_one_rank_pass`).",
        "- **micro**: the TFLite Micro host interpreter loads and runs the file; SQNR against PyTorch.",
        "",
        "| operator | family | fp32 cpu | GPU | fp32 micro | int8 cpu | int8 integer | Edge TPU | int8 micro |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, modes in table.items():
        fp32, int8 = modes.get("fp32"), modes.get("int8")
        family = (fp32 or int8 or {}).get("family", "")
        cells = [
            f"`{_md(case)}`", _md(family),
            _cpu_cell(fp32) if fp32 else "–", _gpu_cell(fp32) if fp32 else "–", _micro_cell(fp32) if fp32 else "–",
            _cpu_cell(int8) if int8 else "–", _integer_cell(int8) if int8 else "–", _tpu_cell(int8) if int8 else "–",
            _micro_cell(int8) if int8 else "–",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    found = failures(results)
    lines += ["", f"{len(table)} operators. " + "; ".join(_tally(results, mode) for mode in MODES) + ".", ""]
    titles = {
        "converts_but_does_not_run": "Converted but LiteRT does not run them",
        "exit_4": "Internal errors (exit 4)",
        "stays_float_in_int8": "Operators left in float under --quantize int8 (and what each backend gave)",
        "other": "Other failures",
    }
    for key, title in titles.items():
        lines += [f"## {title} ({len(found[key])})", ""]
        lines += [f"- {_md(item)}" for item in found[key]] or ["None."]
        lines.append("")
    disagree = [r["case"] for r in results if r.get("float_ops") and r.get("integer_check_fully_integer")]
    lines += [
        f"## int8 models with float operators that edge-export's report calls fully integer ({len(disagree)})", "",
        "The report's `quantization.fully_integer` against the operators read from the written file (the",
        "int8 integer column): until 2026-12-02 the report looked only at tensors between integer operators,",
        "so a model whose one operator computes in float between float I/O passed it (9 such cases then).",
        "",
    ]
    lines += [f"- {_md(case)}" for case in disagree] or ["None."]
    lines.append("")
    lines += _lowering_section(results)
    micro_no = [f"{r['case']} ({r['mode']}): {r['micro']['error']}" for r in results if r.get("micro") and not r["micro"]["runs"]]
    lines += [f"## Not run by the TFLite Micro host interpreter ({len(micro_no)})", ""]
    lines += [f"- {_md(item)}" for item in micro_no] or ["None."]
    lines.append("")
    return "\n".join(lines)


# ---- command line ------------------------------------------------------------------------------------


def _merged(data: dict, results: list[dict], names: set[str], rerun: dict, order: list[str]) -> dict:
    """``data`` with the rows (case and mode) in ``results`` replaced (cases in ``order``) and the rerun noted."""
    fresh = {(r["case"], r["mode"]) for r in results}
    rows = [r for r in data["results"] if (r["case"], r["mode"]) not in fresh] + results
    rows.sort(key=lambda r: (order.index(r["case"]) if r["case"] in order else len(order), r["mode"]))
    return {**data, "results": rows, "reruns": [*data.get("reruns", []), rerun]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case and mode")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--markdown", type=Path, default=DEFAULT_MARKDOWN)
    parser.add_argument("--render-only", action="store_true", help="regenerate the Markdown from --results")
    parser.add_argument("--merge", action="store_true", help="with --cases: replace those cases' rows (in --modes) in --results, keep the rest")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--results-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(HERE)]
    modes = [m for m in args.modes.split(",") if m]
    if args.child:
        _child_main([args.child], modes, args.results_dir, args.workdir)
        return
    if args.render_only:
        data = json.loads(args.results.read_text())
    else:
        from op_coverage_cases import CASES

        names = [c for c in args.cases.split(",") if c] or list(CASES)
        unknown = sorted(set(names) - set(CASES))
        if unknown:
            parser.error(f"unknown case(s): {', '.join(unknown)}")
        started = time.perf_counter()
        results = sweep(names, modes, timeout=args.timeout)
        command = "python benchmarks/op_coverage.py " + " ".join(argv if argv is not None else sys.argv[1:])
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        if args.merge and args.results.exists():
            data = _merged(json.loads(args.results.read_text()), results, set(names), {"command": command.strip(), "date": now}, list(CASES))
        else:
            data = {"command": command.strip(), "date": now, "seconds": round(time.perf_counter() - started), "results": results}
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(data, indent=1) + "\n")
    args.markdown.write_text(render_markdown(
        data["results"], command=data["command"], date=data["date"], seconds=data.get("seconds"), reruns=data.get("reruns", ()),
    ))
    print(f"wrote {args.markdown}" if args.render_only else f"wrote {args.results} and {args.markdown}")


if __name__ == "__main__":
    main()
