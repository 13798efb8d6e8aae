"""Export the benchmark models with a fixed set of options and diff the reports of two runs (issue 22).

A restructuring that must not change behaviour shows it here: run the matrix before and after, on
the two trees, and compare. Each case is one ``edge-export`` CLI run (a subprocess, as a user runs
it) writing into ``<out>/<case>/``: the artifacts, and ``run.json`` with the command line, the exit
code, stdout and stderr. ``--compare`` reads two such folders, normalises what legitimately differs
between runs and prints the rest:

- time stamps, stage timings, per-backend seconds, the time budget's use, host latency figures (the
  ratio, the ``slower`` flag and its note follow the clock too);
- absolute paths: the run's folder, the repository roots, other temporary folders;
- the Markdown columns headed "seconds" or "... ms", and numbers followed by ``s``/``ms``/``x``.

Binary artifacts (.tflite, .npz, ...) are compared by their SHA-256; text artifacts (the C bundle, the
tensor-name map, JSON sidecars) as normalised text.

    PYTHONPATH=. nice -n 10 python benchmarks/report_diff.py --out /tmp/reports-before   # on the old tree
    PYTHONPATH=. nice -n 10 python benchmarks/report_diff.py --out /tmp/reports-after    # on the new tree
    python benchmarks/report_diff.py --compare /tmp/reports-before /tmp/reports-after    # exit 1 on a difference

``--only cnn,int8`` runs the cases whose name contains one of the words; ``--list`` names the cases.
The models are built in code with fixed seeds (``python -m`` imports this file as ``report_diff``:
the CLI loads ``report_diff:small_cnn`` and the others from here).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
CASE_TIMEOUT_SECONDS = 1800
DIFF_LINES = 60  # per file: enough to see what changed, short enough to read the rest
# The factories run inside the CLI after its import of this module: their imports need both folders.
for _folder in (str(REPO), str(BENCHMARKS)):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

# ---- the models (module-level factories: the CLI imports them as report_diff:<name>) ------------


def _seeded(build: Any) -> Any:
    import torch
    from testing_models import random_batchnorm_stats

    torch.manual_seed(0)
    return random_batchnorm_stats(build(), seed=0).eval()


def small_cnn() -> Any:
    from testing_models import SmallCNN

    return _seeded(SmallCNN)


def mobilenet_v2() -> Any:
    from bench_models import MobileNetV2

    return _seeded(lambda: MobileNetV2(width=0.5, num_classes=10))


def resnet18() -> Any:
    from bench_models import ResNet18

    return _seeded(lambda: ResNet18(num_classes=10))


def small_transformer() -> Any:
    from testing_models import transformer_encoder_like

    return _seeded(lambda: transformer_encoder_like(dim=32, seq=16, num_classes=10))


# ---- the matrix ----------------------------------------------------------------------------------

# model name -> (factory, input shape): small inputs, so that a whole run takes minutes.
MODELS = {
    "cnn": ("small_cnn", "1,3,32,32"),
    "mobilenetv2": ("mobilenet_v2", "1,3,64,64"),
    "resnet18": ("resnet18", "1,3,64,64"),
    "transformer": ("small_transformer", "1,16,32"),
}
# option combination -> export arguments
COMBINATIONS = {
    "float": (),
    "fp16": ("--quantize", "fp16"),
    "int8": ("--quantize", "int8"),
    "micro": ("--quantize", "int8", "--target", "micro"),
    "edgetpu": ("--target", "edgetpu"),
    "gpu": ("--target", "gpu"),
}
# ResNet-18's 11 M int8 weights fit no microcontroller, and its C array would be ~60 MB of text.
SKIPPED = {("resnet18", "micro")}
PER_LAYER = ("mobilenetv2", ("--quantize", "int8", "--per-layer"))
VALIDATED = ("cnn", "int8")  # `edge-export validate` of this export against its PyTorch model


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]  # after `python -m edge_export`; {out} is the run's folder


def cases() -> list[Case]:
    found = []
    for model, (factory, shape) in MODELS.items():
        for combo, args in COMBINATIONS.items():
            if (model, combo) not in SKIPPED:
                found.append(_export_case(f"{model}-{combo}", factory, shape, args, model))
    model, args = PER_LAYER
    found.append(_export_case(f"{model}-int8-per-layer", MODELS[model][0], MODELS[model][1], args, model))
    model, combo = VALIDATED
    factory, shape = MODELS[model]
    tflite = f"{{out}}/{model}-{combo}/{model}.tflite"
    report = f"{{out}}/{model}-{combo}-validate/{model}.validate"
    found.append(Case(f"{model}-{combo}-validate", ("validate", tflite, "--reference", f"report_diff:{factory}",
                                                    "--input-shape", shape, "--report", report)))
    return found


def _export_case(name: str, factory: str, shape: str, args: tuple[str, ...], stem: str) -> Case:
    return Case(name, ("export", f"report_diff:{factory}", "--input-shape", shape,
                       "-o", f"{{out}}/{name}/{stem}.tflite", *args))


# ---- running -------------------------------------------------------------------------------------


def run_case(case: Case, out: Path) -> dict:
    folder = out / case.name
    folder.mkdir(parents=True, exist_ok=True)
    argv = [a.replace("{out}", str(out)) for a in case.argv]
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "edge_export", *argv], cwd=BENCHMARKS, capture_output=True,
                              text=True, timeout=CASE_TIMEOUT_SECONDS, env=_child_env())
        exit_code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        exit_code, stdout, stderr = "timeout", _text(exc.stdout), _text(exc.stderr)
    record = {"argv": list(case.argv), "exit_code": exit_code, "stdout": stdout, "stderr": stderr,
              "seconds": round(time.monotonic() - started, 1)}
    (folder / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def _child_env() -> dict[str, str]:
    # The children import the edge_export this process would import: PYTHONPATH made absolute (they
    # run in benchmarks/); the terminal summary without colours, at a fixed width.
    paths = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), NO_COLOR="1", COLUMNS="200", TERM="dumb")


def run_matrix(out: Path, only: list[str]) -> int:
    out = out.resolve()
    selected = [c for c in cases() if not only or any(word in c.name for word in only)]
    print(f"edge_export from {_edge_export_root()}; {len(selected)} cases into {out}", flush=True)
    # The tree the runs imported: its paths in the reports (a model's source lines) are the run's own
    # repository, masked as such when two runs from different trees are compared.
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps({"edge_export_root": str(_edge_export_root())}) + "\n")
    for case in selected:
        record = run_case(case, out)
        print(f"{case.name:<28} exit {record['exit_code']!s:<8} {record['seconds']:>7.1f} s", flush=True)
    return 0


def _recorded_root(out: Path) -> Path | None:
    """The tree a run's cases imported edge_export from (``matrix.json``, written by the run)."""
    record = out / "matrix.json"
    return Path(json.loads(record.read_text())["edge_export_root"]) if record.is_file() else None


def _edge_export_root() -> Path | None:
    spec = importlib.util.find_spec("edge_export")
    return Path(spec.origin).resolve().parents[1] if spec and spec.origin else None


# ---- normalising ---------------------------------------------------------------------------------

MASK = "<masked>"
_TIMING_KEY = re.compile(r"(^|_)(seconds|ms|created_at)$|^(ratio|slower)$")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?")
# Numbers in text, with the decimal point as the Markdown report escapes it ("2\.80x") or not.
_DURATION = re.compile(r"(?<![\w.\\])[-+]?\d+(\\?\.\d+)?(e[-+]?\d+)? ?(ms|s)\b")
_RATIO = re.compile(r"(?<![\w.\\])\d+(\\?\.\d+)?x\b")
_LATENCY_RUNS = re.compile(r"medians of \d+ interleaved runs")
_TMP_PATH = re.compile(r"/tmp/[^\s'\"`)\]<>|,;]*")
_TABLE_CELL = re.compile(r"(?<!\\)\|")
_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]()#!|~$:.])")


class Normaliser:
    """What differs between two runs of the same code, replaced by placeholders."""

    def __init__(self, out: Path) -> None:
        roots = {str(out.resolve()): "<OUT>", str(REPO): "<REPO>"}
        for found in (_edge_export_root(), _recorded_root(out)):
            if found is not None:
                roots.setdefault(str(found), "<REPO>")
        # The Markdown report escapes punctuation in paths (reports/markdown.py, escape_markdown).
        roots.update({_MD_PUNCTUATION.sub(r"\\\1", root): placeholder for root, placeholder in roots.items()})
        # The longest first: the run's folder may sit inside a repository or under /tmp.
        self.roots = sorted(roots.items(), key=lambda kv: -len(kv[0]))
        self.latency_notes: set[str] = set()

    def paths(self, text: str) -> str:
        for root, placeholder in self.roots:
            text = text.replace(root, placeholder)
        return _TMP_PATH.sub("<TMP>", text)

    def value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            if key == "host_latency":  # how many runs fit the timing budget, and the slower flag's note
                if isinstance(value.get("note"), str):
                    self.latency_notes.update((value["note"], _markdown_escaped(value["note"])))
                value = dict(value, note=MASK, runs=MASK)
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, key) for v in value]
        if _TIMING_KEY.search(key) and value is not None:
            return MASK
        return self.paths(value) if isinstance(value, str) else value

    def text(self, text: str) -> str:
        lines = [line for line in text.splitlines() if not any(note in line for note in self.latency_notes)]
        text = "\n".join(_mask_timing_columns(lines))
        text = _TIMESTAMP.sub("<timestamp>", self.paths(text))
        text = _LATENCY_RUNS.sub("medians of <runs> interleaved runs", text)
        return _RATIO.sub("<ratio>", _DURATION.sub("<duration>", text))


def _markdown_escaped(text: str) -> str:
    """``text`` as reports/markdown.py's escape_markdown writes it (without importing edge_export)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCTUATION.sub(r"\\\1", text)


def _mask_timing_columns(lines: list[str]) -> list[str]:
    """Markdown table cells under a "seconds" or "... ms" header."""
    out, masked = [], set()
    for line in lines:
        if not line.startswith("|"):
            masked = set()
        else:
            cells = _TABLE_CELL.split(line)
            headers = [c.strip().lower() for c in cells]
            if not masked and not set(line) <= set("|-: "):
                masked = {i for i, h in enumerate(headers) if h.endswith("seconds") or h.endswith(" ms")}
                masked.discard(0)
            elif not set(line) <= set("|-: "):
                line = "|".join(MASK if i in masked and i < len(cells) - 1 else c for i, c in enumerate(cells))
        out.append(line)
    return out


def normalised_case(folder: Path, out: Path) -> dict[str, str]:
    """Every file of one case as comparable text, keyed by its path inside the case folder."""
    norm = Normaliser(out)
    files: dict[str, str] = {}
    texts: list[tuple[str, str]] = []
    # JSON first: the host latency notes they hold are then masked in the Markdown and terminal text.
    for path in sorted(folder.rglob("*"), key=lambda p: (p.suffix != ".json", str(p))):
        if path.is_dir():
            continue
        name = str(path.relative_to(folder))
        data = path.read_bytes()
        if name == "run.json":
            record = json.loads(data)
            record.pop("seconds", None)
            files["exit_code"] = str(record["exit_code"])
            texts += [("stdout", record["stdout"]), ("stderr", record["stderr"])]
            continue
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            files[name] = f"sha256 {hashlib.sha256(data).hexdigest()} ({len(data)} bytes)"
            continue
        if path.suffix == ".json":
            files[name] = json.dumps(norm.value(json.loads(content)), indent=1, sort_keys=True)
        else:
            texts.append((name, content))
    for name, content in texts:
        files[name] = norm.text(content)
    return files


# ---- comparing -----------------------------------------------------------------------------------


def compare(first: Path, second: Path) -> int:
    names = sorted({p.name for p in first.iterdir() if p.is_dir()} | {p.name for p in second.iterdir() if p.is_dir()})
    differences = 0
    for name in names:
        a = normalised_case(first / name, first) if (first / name).is_dir() else None
        b = normalised_case(second / name, second) if (second / name).is_dir() else None
        if a is None or b is None:
            print(f"{name}: only in {second if a is None else first}")
            differences += 1
            continue
        for file in sorted(set(a) | set(b)):
            if a.get(file) == b.get(file):
                continue
            differences += 1
            if file not in a or file not in b:
                print(f"{name}/{file}: only in {first if file in a else second}")
                continue
            diff = list(difflib.unified_diff(a[file].splitlines(), b[file].splitlines(), f"{first.name}/{name}/{file}",
                                             f"{second.name}/{name}/{file}", lineterm="", n=1))
            print("\n".join(diff[:DIFF_LINES]) + (f"\n... {len(diff) - DIFF_LINES} more lines" if len(diff) > DIFF_LINES else ""))
    print(f"{len(names)} cases compared: " + (f"{differences} differing files" if differences else "identical after normalising"))
    return 1 if differences else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", type=Path, help="run the matrix, writing each case into DIR/<case>/")
    mode.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"), help="diff two runs; exit 1 on a difference")
    mode.add_argument("--list", action="store_true", help="name the cases and their command lines")
    parser.add_argument("--only", default="", help="comma-separated words: run the cases whose name holds one")
    args = parser.parse_args(argv)
    if args.list:
        for case in cases():
            print(f"{case.name:<28} edge-export {' '.join(case.argv)}")
        return 0
    if args.compare:
        return compare(*args.compare)
    return run_matrix(args.out, [w for w in args.only.split(",") if w])


if __name__ == "__main__":
    sys.exit(main())
