"""The zoo: edge-export on real architectures nobody here wrote (issue 21, item 4). Run by developers,
not by CI.

Builds the models of benchmarks/zoo_models.py (`transformers` configs, random weights with PyTorch's
default init, BatchNorm statistics measured on seeded image-like batches; nothing is downloaded) and
exports each through the Python API (`edge_export.export`) in its own subprocess with a timeout, one
model at a time, so that a hang or a crash is a row (`timeout`, `crash`), not the end of the sweep.
Per model, these jobs (`--jobs`; the default is int8fb,static,fp32; a second sweep with
`--jobs int8` adds the default int8 export):

    int8fb   --quantize int8 --quant-backend flatbuffer   the cheaper backend alone: time, SQNR, fully integer
    int8pt2e --quantize int8 --quant-backend pt2e   PT2E alone (with int8fb: what auto's time compares with)
    static   the Edge TPU and TFLite Micro checkers (edge_export.targets) on the int8 (or int8fb) model: predicted
             Edge TPU share and where the graph is cut, operators TFLite Micro has no kernel for (no
             second quantization; the model has float I/O and no Edge TPU rewrites)
    fp32     --target gpu (2 parity samples)    fp32 parity (SQNR), GPU delegate share, TRANSPOSE count
    int8     --quantize int8 (the defaults: auto backend)   wall and CPU time, time per stage, SQNR, fully
             integer, backend kept
    micro    --target micro  (2 parity samples, no C bundle)   TFLite Micro viability, end to end
    edgetpu  --target edgetpu                   predicted Edge TPU share after its rewrites
    mixed    --quantize int8 --min-sqnr 30 --no-latency   the default mixed precision (auto: float on cpu);
             skipped when the int8 model is already fully integer at >= 30 dB
    mixed16  --quantize int8 --min-sqnr 30 --mixed-precision int16 --no-latency   the same target, raised layers int16
             (fully integer when the operators have int16 kernels); skipped the same way

Image models export with --channels-last (what an app feeding camera pixels does); every output is
judged as `regression` (random-weight logits make top-1 meaningless), so SQNR is what counts. The
int8 calibration is the tool's default: synthetic, 128 samples.

    python benchmarks/zoo.py run [--models a,b] [--jobs int8fb,static,fp32,int8,micro,edgetpu,mixed] [--deadline 20:25]
                                 [--work /tmp/zoo] [--out benchmarks/results]
                                 [--init pytorch|transformers]
    python benchmarks/zoo.py table [--work /tmp/zoo] [--out benchmarks/results]
    python benchmarks/zoo.py list

`run` takes the models in the order given, one worker process per model (built once, its jobs in
turn, one intra-op thread), skips (model, job) pairs already in --work (so a stopped sweep
resumes), stops at --deadline (UTC), and rewrites the table after every model: <out>/zoo.md
(Markdown) and <out>/zoo.json (one summary per model and job, with the load average when the job
started). The full reports stay in --work/raw. A job is stopped when its worker has used
CPU_LIMIT_SECONDS of CPU time (the wall time on a loaded machine says little) or 30 minutes of wall
time. Run it with `nice -n 10` on a shared machine.

Needs only the project's environment (`transformers` comes with litert-torch). timm's families
(GhostNet, MnasNet, RepVGG/MobileOne, FastViT, MobileNetV3/V4, EfficientNetV2) are not included:
timm needs torchvision, which for torch 2.13 (0.28.x) is published only as a CUDA build, and that
build does not import on the CPU torch (`RuntimeError: operator torchvision::nms does not exist`: its
`_C.so` links libc10_cuda.so and libtorch_cuda.so, which the CPU torch does not ship). Where a CPU
torchvision exists for the installed torch (`pip install timm torchvision`; never a project
dependency), timm models can be added to zoo_models.MODELS the same way. EfficientFormer is not in
transformers 5.x (removed with its deprecated models), so it is missing too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

JOBS = ("int8fb", "int8pt2e", "static", "fp32", "int8", "micro", "edgetpu", "mixed", "mixed16")
DEFAULT_JOBS = ("int8fb", "static", "fp32")
# A job is stopped when its worker has used this much CPU time (user + system, the worker and its
# forked children): on a machine shared with other jobs the wall time says little, and CPU time is
# about what the job would take alone. int8: 300 s is 3.3x the 90 s target.
CPU_LIMIT_SECONDS = {"int8fb": 200, "int8pt2e": 300, "static": 60, "fp32": 150, "int8": 300, "micro": 300, "edgetpu": 300, "mixed": 450, "mixed16": 450}
BUILD_CPU_SECONDS = 60  # added to the first job's limit: imports and the BatchNorm passes
WALL_LIMIT_SECONDS = 1800  # and whatever the load, no job runs longer than this
MIN_SQNR_DB = 30.0
IMAGE_KINDS = ("image", "detection")


# --- jobs, in a worker process --------------------------------------------------------------------


def job_options(job: str, kind: str) -> dict:
    """The export options of one job (edge_export.export keyword arguments)."""
    common = {"output_kinds": "regression", "quiet_libraries": True}
    nhwc = {"channels_last": True} if kind in IMAGE_KINDS else {}
    return {
        "int8": {**common, **nhwc, "quantize": "int8"},
        "int8fb": {**common, **nhwc, "quantize": "int8", "quant_backend": "flatbuffer"},
        "int8pt2e": {**common, **nhwc, "quantize": "int8", "quant_backend": "pt2e"},
        "fp32": {**common, **nhwc, "target": "gpu", "samples": 2},
        "micro": {**common, "target": "micro", "samples": 2, "no_emit_c": True},
        "edgetpu": {**common, "target": "edgetpu"},
        "mixed": {**common, **nhwc, "quantize": "int8", "min_sqnr": MIN_SQNR_DB, "host_latency": False},
        "mixed16": {**common, **nhwc, "quantize": "int8", "min_sqnr": MIN_SQNR_DB, "mixed_precision": "int16", "host_latency": False},
    }[job]


def _drop_operator_lists(value: Any) -> Any:
    """The report without its per-operator lists (hundreds of rows per model; the table never reads them)."""
    if isinstance(value, dict):
        return {k: _drop_operator_lists(v) for k, v in value.items() if k not in ("ops", "table")}
    if isinstance(value, list):
        return [_drop_operator_lists(v) for v in value]
    return value


def _artifact(work: Path, name: str, job: str) -> Path:
    return work / "artifacts" / f"{name}.{job}" / f"{name}.tflite"


def _export_job(name: str, job: str, model: Any, example: tuple, work: Path) -> dict:
    import edge_export
    from edge_export.errors import EdgeExportError
    from zoo_models import MODELS

    path = _artifact(work, name, job)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = edge_export.export(model, example_inputs=example, output=path, **job_options(job, MODELS[name].kind))
    except EdgeExportError as exc:
        return {"status": "error", "exit_code": exc.exit_code, "error_type": type(exc).__name__, "error": str(exc)}
    return {"status": "ok", "exit_code": result.exit_code, "report": _drop_operator_lists(result.report)}


def _static_job(name: str, work: Path) -> dict:
    """The Edge TPU and TFLite Micro static checks on the int8 job's model (no Edge TPU rewrites, float
    I/O: what --target edgetpu/micro would start from), without another quantization."""
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.targets.edgetpu.checks import check_edgetpu
    from edge_export.targets.micro.target import check_micro

    path = next((p for p in (_artifact(work, name, j) for j in ("int8", "int8fb")) if p.exists()), None)
    if path is None:
        return {"status": "not-run", "reason": "no int8 model"}
    model = load_flatbuffer(path)
    tpu, micro = check_edgetpu(model), check_micro(model)
    cut = tpu.first_unmapped.describe() if tpu.first_unmapped is not None else None
    return {"status": "ok", "edgetpu": {"share": tpu.share_on_tpu, "on_tpu": tpu.num_on_tpu, "ops": tpu.num_ops,
                                        "first_unmapped": cut, "model_problems": list(tpu.model_problems)},
            "micro": {"unsupported_ops": list(micro.unsupported_ops), "fully_integer": micro.fully_integer,
                      "float_tensors": len(micro.float_tensors), "arena_estimate_bytes": micro.arena_estimate_bytes}}


def run_worker(name: str, jobs: list[str], work: Path, init: str = "pytorch") -> int:
    """Build one model once, run its jobs in order, write work/raw/<name>.<job>.json after each."""
    start = time.perf_counter()
    try:
        from zoo_models import build

        model, example = build(name, init=init)
        built = round(time.perf_counter() - start, 2)
    except Exception as exc:
        for job in jobs:
            _write_json(_raw(work, name, job), {"model": name, "job": job, "status": "error", "exit_code": 4, "error_type": type(exc).__name__,
                                                "error": f"building the model: {exc}", "traceback": traceback.format_exc()[-3000:]})
        return 0
    for job in jobs:
        record: dict[str, Any] = {"model": name, "job": job, "init": init, "load_average": os.getloadavg(), "build_seconds": built}
        job_start, cpu_start = time.perf_counter(), _cpu_seconds()
        try:
            record.update(_static_job(name, work) if job == "static" else _export_job(name, job, model, example, work))
        except Exception as exc:  # an internal error is a row too: the sweep goes on
            record.update(status="error", exit_code=4, error_type=type(exc).__name__, error=str(exc), traceback=traceback.format_exc()[-3000:])
        record["seconds"] = round(time.perf_counter() - job_start, 2)
        record["cpu_seconds"] = round(_cpu_seconds() - cpu_start, 2)
        _write_json(_raw(work, name, job), record)
    return 0


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the forked LiteRT runs):
    on a shared machine a better guide to the quiet wall time than the wall time itself."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _raw(work: Path, name: str, job: str) -> Path:
    return work / "raw" / f"{name}.{job}.json"


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    tmp.replace(path)


# --- the sweep -------------------------------------------------------------------------------------


def _start_worker(name: str, jobs: list[str], work: Path, init: str) -> subprocess.Popen:
    command = [sys.executable, str(Path(__file__).resolve()), "_worker", name, ",".join(jobs), "--work", str(work), "--init", init]
    log = work / "logs" / f"{name}.{jobs[0]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # One intra-op thread: on a shared, oversubscribed machine a second OpenMP thread mostly spins
    # waiting for the first, inflating the CPU time the limits and the table read.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _group_cpu_seconds(pgid: int) -> float:
    """CPU time of every live process in the group, with the children each has reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ..., utime at 11
            total += sum(int(f) for f in fields[11:15])
    return total / tick


class _JobClock:
    """Wall and CPU time of the job a worker is on."""

    def __init__(self, pgid: int, extra_cpu: float) -> None:
        self.pgid, self.extra_cpu = pgid, extra_cpu
        self.restart(extra_cpu)

    def restart(self, extra_cpu: float = 0.0) -> None:
        self.wall_start, self.cpu_start, self.extra_cpu = time.perf_counter(), _group_cpu_seconds(self.pgid), extra_cpu

    def wall(self) -> float:
        return time.perf_counter() - self.wall_start

    def cpu(self) -> float:
        return _group_cpu_seconds(self.pgid) - self.cpu_start

    def over(self, job: str, deadline: dt.datetime | None) -> bool:
        late = deadline is not None and dt.datetime.now(dt.timezone.utc) >= deadline
        return late or self.wall() > WALL_LIMIT_SECONDS or self.cpu() > CPU_LIMIT_SECONDS[job] + self.extra_cpu


def _run_model(name: str, jobs: list[str], work: Path, deadline: dt.datetime | None, init: str) -> None:
    """One worker for the model's jobs; a job past its CPU or wall limit (the first one's includes the
    build), or one the worker died in, becomes a `timeout` or `crash` record, and a new worker takes
    the rest."""
    remaining = [j for j in jobs if not _raw(work, name, j).exists()]
    while remaining:
        load = os.getloadavg()
        process = _start_worker(name, remaining, work, init)
        clock = _JobClock(process.pid, BUILD_CPU_SECONDS)
        while True:
            code = process.poll()
            done = [j for j in remaining if _raw(work, name, j).exists()]
            if done:
                remaining = [j for j in remaining if j not in done]
                clock.restart()
            if not remaining or code is not None:
                break
            if clock.over(remaining[0], deadline):
                cpu, wall = clock.cpu(), clock.wall()
                os.killpg(process.pid, signal.SIGKILL)  # the worker's own group: its children too
                process.wait()
                _write_json(_raw(work, name, remaining[0]), {"model": name, "job": remaining[0], "status": "timeout", "load_average": load,
                                                             "seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
                                                             "deadline": deadline is not None and dt.datetime.now(dt.timezone.utc) >= deadline})
                remaining.pop(0)
                break
            time.sleep(2)
        if remaining and code is not None and not _raw(work, name, remaining[0]).exists():
            _write_json(_raw(work, name, remaining[0]), {"model": name, "job": remaining[0], "status": "crash", "exit_code": code, "load_average": load,
                                                         "seconds": round(clock.wall(), 1), "error": f"the worker process exited {code} (signal or native crash)"})
            remaining.pop(0)
        if deadline is not None and dt.datetime.now(dt.timezone.utc) >= deadline:
            return


def _skip_mixed(name: str, work: Path) -> str | None:
    """Why the mixed-precision job need not run: the int8 model already meets the target."""
    path = next((p for p in (_raw(work, name, j) for j in ("int8", "int8fb")) if p.exists()), None)
    if path is None:
        return None
    int8 = summarize(json.loads(path.read_text()))
    if int8.get("fully_integer") and (int8.get("sqnr_db") or 0) >= MIN_SQNR_DB:
        return f"int8 is fully integer at {int8['sqnr_db']:.1f} dB >= {MIN_SQNR_DB:g} dB"
    return None


def run_sweep(models: list[str], jobs: list[str], work: Path, out: Path, deadline: dt.datetime | None, init: str = "pytorch") -> None:
    for name in models:
        if deadline is not None and (deadline - dt.datetime.now(dt.timezone.utc)).total_seconds() < 60:
            print(f"deadline reached: {name} and later models not run", flush=True)
            break
        wanted = []
        for job in jobs:
            if job in ("mixed", "mixed16") and not _raw(work, name, job).exists() and (why := _skip_mixed(name, work)):
                _write_json(_raw(work, name, job), {"model": name, "job": job, "status": "not-needed", "reason": why})
            else:
                wanted.append(job)
        print(f"{dt.datetime.now(dt.timezone.utc):%H:%M:%S} {name} {','.join(wanted)} (load {os.getloadavg()[0]:.1f})", flush=True)
        _run_model(name, wanted, work, deadline, init)
        write_table(work, out, models)


# --- summaries and the table -----------------------------------------------------------------------


def _first_float(check: dict) -> str | None:
    """How many tensors stay float, and the first one an operator computes (not a float constant)."""
    entries = check.get("float_tensors") or []
    if not entries:
        return None
    computed = [e for e in entries if e.get("producer")]
    arithmetic = [e for e in computed if e["producer"] not in ("QUANTIZE", "DEQUANTIZE")]
    first = (arithmetic or computed or entries)[0]
    modules = check.get("float_modules") or []
    return (f"{len(entries)} float tensors in {len(modules)} modules; first computed in float: "
            f"{first.get('producer') or 'a constant'} in module {first.get('module') or '(root)'}")


def summarize(record: dict) -> dict:
    """The figures the table needs from one job's record."""
    report = record.get("report") or {}
    summary = {k: record.get(k) for k in ("model", "job", "status", "exit_code", "seconds", "cpu_seconds", "build_seconds", "error_type", "load_average")}
    summary["error"] = _one_line(record.get("error"))
    summary["reason"] = record.get("reason")
    validation = report.get("validation") or {}
    summary["sqnr_db"] = (validation.get("worst") or {}).get("sqnr_db")
    summary["verdict"] = report.get("verdict")
    flatbuffer = report.get("flatbuffer") or {}
    summary["transposes"] = (flatbuffer.get("op_counts") or {}).get("TRANSPOSE", 0) if flatbuffer else None
    summary["num_operators"] = flatbuffer.get("num_operators")
    summary["stages"] = {s["name"]: s["seconds"] for s in report.get("stages") or []}
    quant = report.get("quantization") or {}
    if quant:
        check = quant.get("integer_check") or {}
        summary.update(fully_integer=quant.get("fully_integer"), backend=quant.get("backend"), float_summary=_first_float(check),
                       attempts=[{k: a.get(k) for k in ("backend", "ok", "error", "fully_integer", "sqnr_db", "seconds")} for a in quant.get("attempts") or []])
    target = report.get("target") or {}
    for key in ("gpu", "edgetpu", "micro"):
        if target.get(key):
            summary[key] = _target_summary(key, target[key])
        elif record.get(key):  # the static job's checks of the int8 model
            summary[key] = record[key]
    mixed = report.get("mixed_precision")
    if mixed:
        promoted = mixed.get("promoted") or []
        summary["mixed"] = {k: mixed.get(k) for k in ("met", "reason", "precision", "int8_sqnr_db", "sqnr_db", "fully_integer", "seconds")}
        summary["mixed"]["promoted"] = len(promoted)
        summary["mixed"]["first_promoted"] = f"{promoted[0].get('module_path')} ({promoted[0].get('opcode')})" if promoted else None
    return summary


def _target_summary(key: str, section: dict) -> dict:
    if key == "gpu":
        first = section.get("first_unsupported") or {}
        return {"share_ops": section.get("share_ops_on_gpu"), "share_macs": section.get("share_macs_on_gpu"),
                "partitions": section.get("num_partitions"), "unsupported_ops": section.get("unsupported_ops"),
                "first_unsupported": f"{first.get('opcode')} in module {first.get('module_path')}" if first else None}
    if key == "edgetpu":
        first = section.get("first_unmapped") or {}
        return {"share": section.get("share_on_tpu"), "on_tpu": section.get("num_on_tpu"), "ops": section.get("num_ops"),
                "segments": section.get("num_segments"), "fully_mapped": section.get("fully_mapped"),
                "first_unmapped": f"{first.get('operator')} in {first.get('module') or first.get('module_path')}: {first.get('reason')}" if first else None}
    return {"unsupported_ops": section.get("unsupported_ops"), "problems": section.get("problems"),
            "arena_bytes": section.get("arena_bytes"), "fully_integer": section.get("fully_integer")}


def _one_line(text: Any, limit: int = 420) -> str | None:
    """One line, without the site-packages prefix of library paths, cut at ``limit`` characters."""
    if not text:
        return None
    line = re.sub(r"/\S*/site-packages/", "", " ".join(str(text).split()))
    return line if len(line) <= limit else line[: limit - 1] + "…"


def load_summaries(work: Path, models: list[str]) -> dict[str, dict[str, dict]]:
    table: dict[str, dict[str, dict]] = {}
    for name in models:
        for job in JOBS:
            path = work / "raw" / f"{name}.{job}.json"
            if path.exists():
                table.setdefault(name, {})[job] = summarize(json.loads(path.read_text()))
    return table


def write_table(work: Path, out: Path, models: list[str]) -> None:
    from zoo_models import MODELS

    summaries = load_summaries(work, models)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "zoo.json", {"models": {n: {"family": MODELS[n].family, "kind": MODELS[n].kind, "note": MODELS[n].note, "jobs": summaries.get(n, {})} for n in models}})
    (out / "zoo.md").write_text(markdown_table(summaries, models))


def markdown_table(summaries: dict[str, dict[str, dict]], models: list[str]) -> str:
    from zoo_models import MODELS

    from edge_export.reports.markdown import escape_markdown as esc

    head = ("| model | family | fp32 SQNR dB | TRANSPOSE fp32 / int8 | int8, flatbuffer backend: wall, CPU, SQNR (on calibration inputs) | "
            "int8 (defaults) s (largest stages) | "
            "int8 SQNR dB | fully int | backend | mixed, >= 30 dB | Edge TPU share | GPU share (ops / MACs) | micro |\n|" + "---|" * 13 + "\n")
    rows, failures = [], []
    for name in models:
        jobs = summaries.get(name, {})
        rows.append("| " + " | ".join([esc(name), esc(f"{MODELS[name].family} ({MODELS[name].note})"), *_cells(jobs)]) + " |")
        for reason in failure_reasons(jobs):
            failures.append(f"- {esc(name)}: {esc(reason)}")
    text = head + "\n".join(rows) + "\n"
    if failures:
        text += "\nFailures and why (job: module, operator, reason):\n\n" + "\n".join(failures) + "\n"
    return text


def _db(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}"


def _share(value: Any) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _status_cell(job: dict | None) -> str | None:
    if job is None:
        return "not run"
    if job.get("status") == "timeout":
        return "deadline" if job.get("deadline") else f"timeout ({job.get('cpu_seconds', 0):.0f} CPU s)"
    if job.get("status") in ("error", "crash"):
        return f"exit {job.get('exit_code')}"
    return None


def _stages_text(job: dict) -> str:
    stages = sorted((job.get("stages") or {}).items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {seconds:.0f}" for name, seconds in stages[:3] if seconds >= 0.5)
    cpu = f", CPU {job['cpu_seconds']:.0f}" if job.get("cpu_seconds") is not None else ""
    return f"{job.get('seconds', 0):.0f}{cpu} ({shown})"


def _cells(jobs: dict[str, dict]) -> list[str]:
    fp32, int8, flat, static = jobs.get("fp32"), jobs.get("int8"), jobs.get("int8fb"), jobs.get("static")
    cells = [_status_cell(fp32) or _db(fp32.get("sqnr_db"))]
    cells.append(f"{_transposes(fp32)} / {_transposes(int8 or flat)}")
    cells.append(_status_cell(flat) or _flatbuffer_text(flat))
    cells.append(_status_cell(int8) or _stages_text(int8) + _auto_ratio(int8, jobs))
    cells.append(_status_cell(int8) or _db(int8.get("sqnr_db")))
    cells.append(_status_cell(int8) or ("yes" if int8.get("fully_integer") else "no"))
    cells.append(_status_cell(int8) or str(int8.get("backend")))
    int16 = jobs.get("mixed16")
    cells.append(_mixed_cell(jobs.get("mixed")) + (f"; int16: {_mixed_cell(int16)}" if int16 is not None else ""))
    cells.append(_edgetpu_cell(jobs.get("edgetpu"), static))
    gpu = (fp32 or {}).get("gpu") or {}
    cells.append(_status_cell(fp32) or f"{_share(gpu.get('share_ops'))} / {_share(gpu.get('share_macs'))}")
    cells.append(_micro_cell(jobs.get("micro"), static))
    return cells


def _auto_ratio(int8: dict, jobs: dict[str, dict]) -> str:
    """auto's wall time against the backend it kept, run alone (job int8fb or int8pt2e), when that ran."""
    alone = jobs.get({"flatbuffer": "int8fb", "pt2e": "int8pt2e"}.get(int8.get("backend") or "", ""))
    if not alone or alone.get("status") != "ok" or not alone.get("seconds"):
        return ""
    return f"; {int8['seconds'] / alone['seconds']:.2f}x {int8['backend']} alone ({alone['seconds']:.0f} s)"


def _flatbuffer_text(job: dict) -> str:
    """Time, held-out parity SQNR (the calibration inputs' SQNR in brackets), fully integer or not."""
    integer = "int" if job.get("fully_integer") else "float inside"
    calibration = next((a.get("sqnr_db") for a in job.get("attempts") or [] if a.get("backend") == "flatbuffer"), None)
    return f"{job.get('seconds', 0):.0f} s, CPU {job.get('cpu_seconds') or 0:.0f} s: {_db(job.get('sqnr_db'))} dB ({_db(calibration)}), {integer}"


def _edgetpu_cell(full: dict | None, static: dict | None) -> str:
    """--target edgetpu's prediction when that job ran, else the static check of the int8 model (*)."""
    if full is not None:
        return _status_cell(full) or _share((full.get("edgetpu") or {}).get("share"))
    if static is None or static.get("status") != "ok":
        return _status_cell(static) or "not run"
    return _share(static["edgetpu"].get("share")) + "*"


def _micro_cell(full: dict | None, static: dict | None) -> str:
    if full is not None:
        return _status_cell(full) or ("viable" if full.get("exit_code") == 0 else f"exit {full.get('exit_code')}")
    if static is None or static.get("status") != "ok":
        return _status_cell(static) or "not run"
    micro = static["micro"]
    if micro.get("unsupported_ops"):
        return "no kernel: " + ", ".join(micro["unsupported_ops"]) + "*"
    return ("ops ok" if micro.get("fully_integer") else "ops ok, float inside") + "*"


def _transposes(job: dict | None) -> str:
    return "–" if not job or job.get("transposes") is None else str(job["transposes"])


def _mixed_cell(mixed: dict | None) -> str:
    if mixed is None:
        return "not run"
    if mixed.get("status") == "not-needed":
        return "not needed"
    status = _status_cell(mixed)
    if status:
        return status
    info = mixed.get("mixed") or {}
    if not info:
        return f"{_db(mixed.get('sqnr_db'))} dB, no search"
    met = "met" if info.get("met") else "missed"
    integer = "fully int" if info.get("fully_integer") else "float ops"
    return f"{met}: {_db(info.get('sqnr_db'))} dB, {info.get('promoted')} raised, {integer}"


def failure_reasons(jobs: dict[str, dict]) -> list[str]:
    """One line per job that failed or fell short, naming the module and operator the report names."""
    reasons = []
    for job_name, job in jobs.items():
        if job.get("status") in ("error", "crash"):
            reasons.append(f"{job_name}: {job.get('error_type') or 'crash'}: {job.get('error')}")
        elif job.get("status") == "timeout":
            why = "the sweep's deadline" if job.get("deadline") else f"{job.get('cpu_seconds', 0):.0f} CPU s"
            reasons.append(f"{job_name}: no result after {job.get('seconds'):.0f} s wall, {why} (killed); load {job.get('load_average', [0])[0]:.1f}")
        elif job.get("status") == "ok":
            reasons += [f"{job_name}: {r}" for r in _shortfalls(job_name, job)]
    return reasons


def _shortfalls(job_name: str, job: dict) -> list[str]:
    out = []
    if job_name in ("int8", "int8fb"):
        if not job.get("fully_integer"):
            out.append(f"not fully integer: {job.get('float_summary')}")
        if (job.get("sqnr_db") or 0) < MIN_SQNR_DB:
            out.append(f"SQNR {_db(job.get('sqnr_db'))} dB < {MIN_SQNR_DB:g} dB (backend {job.get('backend')})")
        failed = [f"{a['backend']}: {_one_line(a.get('error'), 200)}" for a in job.get("attempts") or [] if not a.get("ok")]
        out += [f"backend {f}" for f in failed]
    elif job_name == "fp32":
        gpu = job.get("gpu") or {}
        if gpu.get("first_unsupported"):
            ops = ", ".join(f"{op} x{n}" for op, n in (gpu.get("unsupported_ops") or {}).items())
            out.append(f"GPU delegate: first unsupported {gpu['first_unsupported']}; unsupported: {ops}")
        if job.get("exit_code"):
            out.append(f"fp32 parity failed: SQNR {_db(job.get('sqnr_db'))} dB")
    elif job_name in ("edgetpu", "static") and (job.get("edgetpu") or {}).get("first_unmapped"):
        out.append(f"Edge TPU graph cut at {_one_line(job['edgetpu']['first_unmapped'], 260)}")
    elif job_name == "micro" and job.get("exit_code"):
        micro = job.get("micro") or {}
        out.append(f"unsupported {micro.get('unsupported_ops')}, problems {micro.get('problems')}, SQNR {_db(job.get('sqnr_db'))} dB")
    elif job_name in ("mixed", "mixed16") and job.get("mixed") and not job["mixed"].get("met"):
        out.append(_one_line(job["mixed"].get("reason"), 250) or "target missed")
    if job_name == "static" and (job.get("micro") or {}).get("unsupported_ops"):
        out.append(f"TFLite Micro has no kernel for {', '.join(job['micro']['unsupported_ops'])}")
    return out


# --- command line ----------------------------------------------------------------------------------


def _deadline(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    hour, minute = (int(x) for x in text.split(":"))
    now = dt.datetime.now(dt.timezone.utc)
    return now.replace(hour=hour, minute=minute, second=0, microsecond=0)


def main(argv: list[str] | None = None) -> int:
    from zoo_models import MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "table", "list", "_worker"))
    parser.add_argument("args", nargs="*")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--jobs", default=",".join(DEFAULT_JOBS))
    parser.add_argument("--deadline", help="HH:MM UTC: start no job after it")
    parser.add_argument("--work", type=Path, default=Path("/tmp/zoo"))
    parser.add_argument("--init", choices=("pytorch", "transformers"), default="pytorch",
                        help="weights: PyTorch's default init of every layer, or transformers' own (use another --work)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS] + [j for j in args.jobs.split(",") if j not in JOBS]
    if unknown:
        parser.error(f"unknown model or job: {', '.join(unknown)}")
    if args.command == "_worker":
        return run_worker(args.args[0], args.args[1].split(","), args.work, args.init)
    if args.command == "list":
        for m in MODELS.values():
            print(f"{m.name:24} {m.kind:10} {m.family}: {m.note}")
    elif args.command == "table":
        write_table(args.work, args.out, models)
    else:
        run_sweep(models, args.jobs.split(","), args.work, args.out, _deadline(args.deadline), args.init)
    return 0


if __name__ == "__main__":
    sys.exit(main())
