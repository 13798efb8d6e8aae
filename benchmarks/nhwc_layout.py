"""TRANSPOSE operators inside NHWC models, before and after the layout passes (issue 24, item 3).

    .venv/bin/python benchmarks/nhwc_layout.py --before BASE_TREE --after . [--models mobilenet_v2,resnet,efficientnet,mobilevit,digits_cnn,digits_mobilenetv2,zoo:NAME] [--modes float,micro]

``BASE_TREE`` is a checkout of the commit before the change (``git archive <commit> | tar -x -C DIR``).

Builds Hugging Face image classifiers from their configs (random weights, nothing downloaded)
and the digits example's two networks (``digits_cnn``, ``digits_mobilenetv2``, random weights), or a model of the zoo (``zoo:convnext_atto``: its builder in
``zoo_models.py``, full size),
saves each as a ``.pt2``, and exports it with each edge-export tree given (``PYTHONPATH`` set to
that tree, one CLI process per export): ``--channels-last`` in float (cpu), ``--target micro``
(int8) and ``--target ethos-u55-128`` (``--modes``). For each export it prints the operator count, the TRANSPOSE count, the host latency of the
written model (LiteRT + XNNPACK, one thread, median of ``--runs`` after warm-up, both trees' models
timed interleaved in this process, the order alternating) and, for micro, the tensor arena TFLite Micro's host
interpreter measured (the report's figure). A model that fails to export is listed with its exit
code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
EDGE_EXPORT = [sys.executable, "-c", "import sys; from edge_export.cli import main; sys.argv[0] = 'edge-export'; main()"]


class Logits(torch.nn.Module):
    """A Hugging Face classifier's logits. Defined at module level: the class's qualified name is
    the root of every tensor name, and provenance reads no module below a class defined inside a
    function (``<locals>``, as torch.export's own wrapper is)."""

    def __init__(self, inner):
        super().__init__()
        self.model = inner

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


def _digits_model(arch: str):
    """The digits example's networks (examples/digits), random weights: a CNN flattening its
    whole feature map into a Linear, and a MobileNetV2-style one pooling with mean(dim=(2, 3))."""
    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    from digits_example import INPUT_SIZE, build_model

    size = INPUT_SIZE[arch]
    return build_model(arch).eval(), (1, 1, size, size)


def _model(name: str, size: int):
    """The module and its input shape."""
    if name in ("mean_cnn", "flatten_cnn"):  # issue 24's two small CNNs (testing_models.py)
        sys.path.insert(0, str(ROOT))
        import testing_models

        return {"mean_cnn": testing_models.MeanPoolCNN, "flatten_cnn": testing_models.FlattenPoolCNN}[name]().eval(), (1, 3, 32, 32)
    if name.startswith("digits_"):
        return _digits_model(name.removeprefix("digits_"))
    if name.startswith("zoo:"):  # the zoo's own builder (benchmarks/zoo_models.py), full size
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from zoo_models import MODELS

        module, example = MODELS[name.removeprefix("zoo:")].build(False)
        return module, tuple(example[0].shape)
    return _hf_model(name, size), (1, 3, size, size)


def _hf_model(name: str, size: int):
    import torch
    import transformers as tf

    if name == "mobilenet_v2":
        model = tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(image_size=size, num_labels=10))
    elif name == "resnet":  # ResNet-18's layout
        model = tf.ResNetForImageClassification(tf.ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], num_labels=10))
    elif name == "efficientnet":  # B0's layout
        model = tf.EfficientNetForImageClassification(tf.EfficientNetConfig(image_size=size, num_labels=10))
    elif name == "mobilevit":  # apple/mobilevit-xx-small's layout
        model = tf.MobileViTForImageClassification(tf.MobileViTConfig(
            image_size=size, hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320],
            expand_ratio=2.0, num_labels=10,
        ))
    else:
        raise SystemExit(f"unknown model {name}")

    return Logits(model).eval()


def _save(name: str, size: int, folder: Path) -> Path:
    import torch

    torch.manual_seed(0)
    module, shape = _model(name, size)
    path = folder / f"{name.replace(':', '_')}.pt2"  # a colon would read as module:attr
    torch.export.save(torch.export.export(module, (torch.randn(shape),)), path)
    return path


def _export(tree: Path, source: Path, out: Path, args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    # cwd: ``python -c`` puts the working folder first on sys.path, before PYTHONPATH
    proc = subprocess.run([*EDGE_EXPORT, str(source), "-o", str(out), "--quiet", *args], env=env, cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    report_path = Path(str(out.with_suffix("")) + ".report.json")
    if not report_path.exists():
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        said = [line for line in lines if line.startswith("error:")] or lines[-1:] or [""]  # the CLI's own paragraph
        return {"exit": proc.returncode, "error": [said[0][:300]], "seconds": seconds}
    report = json.loads(report_path.read_text())
    micro = (report.get("target") or {}).get("micro") or {}
    ethos = (report.get("target") or {}).get("ethos_u")
    validation = report.get("validation") or {}
    return {
        "exit": proc.returncode,
        "seconds": seconds,
        "parity": validation.get("status"),
        "operators": report["flatbuffer"]["num_operators"],
        "transposes": report["flatbuffer"]["op_counts"].get("TRANSPOSE", 0),
        "reshapes": report["flatbuffer"]["op_counts"].get("RESHAPE", 0),
        "arena": micro.get("arena_bytes"),
        "npu": None if ethos is None else f"{ethos['npu_operators']}/{ethos['operators']}",
        "vela_sram": None if ethos is None else ethos["summary"]["sram_bytes"],
        "vela_cycles": None if ethos is None else ethos["summary"]["cycles"],
        "tflite": str(out),
    }


def _latency_ms(paths: list[str], runs: int) -> list[float]:
    """Median latency of each model, the models timed in turn (interleaved) after a warm-up."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreters = []
    for path in paths:
        it = Interpreter(model_path=path, num_threads=1)
        it.allocate_tensors()
        d = it.get_input_details()[0]
        data = np.zeros(d["shape"], dtype=d["dtype"])
        it.set_tensor(d["index"], data)
        it.invoke()
        interpreters.append(it)
    times: list[list[float]] = [[] for _ in paths]
    for round_ in range(runs):
        order = list(range(len(paths)))
        for k in order if round_ % 2 == 0 else order[::-1]:  # alternate who goes first
            start = time.perf_counter()
            interpreters[k].invoke()
            times[k].append((time.perf_counter() - start) * 1000)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="edge-export tree before the change")
    parser.add_argument("--after", type=Path, default=ROOT, help="edge-export tree after the change")
    parser.add_argument("--models", default="mobilenet_v2,resnet,efficientnet,mobilevit")
    parser.add_argument("--size", type=int, default=96, help="input height and width")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--modes", default="float,micro")
    args = parser.parse_args()
    # micro: the flatbuffer backend only (PT2E took 13 min on MobileNetV2 here) and no parity run
    # (the float exports check parity; tests/passes/test_layout_passes.py checks int8 bit-exactness)
    modes = {
        "float": ["--channels-last"],
        "micro": ["--target", "micro", "--quant-backend", "flatbuffer", "--calibration-samples", "16", "--no-emit-c", "--no-validate"],
        "ethos-u55-128": ["--target", "ethos-u55-128", "--quant-backend", "flatbuffer", "--calibration-samples", "16", "--no-emit-c", "--no-validate"],
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.models.split(","):
            try:
                source = _save(name, args.size, folder)
            except Exception as exc:  # a config this transformers version cannot build or trace
                print(f"{name}: not exported ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
                continue
            for mode in args.modes.split(","):
                results = {}
                for label, tree in (("before", args.before), ("after", args.after)):
                    out = folder / label / mode / f"{name.replace(':', '_')}.tflite"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    results[label] = _export(tree.resolve(), source, out, modes[mode])
                ok = [r for r in results.values() if "tflite" in r]
                if len(ok) == 2:
                    for r, ms in zip(ok, _latency_ms([r["tflite"] for r in ok], args.runs)):
                        r["latency_ms"] = round(ms, 3)
                rows.append((name, mode, results))
                print(json.dumps({"model": name, "mode": mode, **{k: {kk: vv for kk, vv in v.items() if kk != "tflite"} for k, v in results.items()}}), flush=True)
    print()
    print("| model | export | operators before -> after | TRANSPOSE before -> after | RESHAPE before -> after | host latency ms before -> after | micro arena bytes (Ethos-U: Vela) before -> after |")
    print("|---|---|---|---|---|---|---|")
    for name, mode, r in rows:
        b, a = r["before"], r["after"]
        if "tflite" not in b or "tflite" not in a:
            print(f"| {name} | {mode} | exit {b['exit']} -> exit {a['exit']}: {a.get('error', [''])[0][:80]} | | | | |")
            continue
        arena = f"{b['arena']} -> {a['arena']}" if b["arena"] is not None else ""
        if b.get("npu") is not None:
            arena += f"; NPU {b['npu']} -> {a['npu']}, Vela SRAM {b['vela_sram']} -> {a['vela_sram']}, cycles {b['vela_cycles']} -> {a['vela_cycles']}"
        print(f"| {name} | {mode} | {b['operators']} -> {a['operators']} | {b['transposes']} -> {a['transposes']} | {b['reshapes']} -> {a['reshapes']} | {b['latency_ms']} -> {a['latency_ms']} | {arena} |")


if __name__ == "__main__":
    main()
