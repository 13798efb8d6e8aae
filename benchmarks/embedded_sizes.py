"""Flash and RAM of the benchmark CNNs for microcontrollers, and Vela's figures for Ethos-U NPUs.

For each model (built in code, random weights, seeded; nothing downloaded):

1. ``--target ethos-u55-128`` with its defaults (the micro rules: int8, int8 NHWC I/O, inner names
   stripped, the C bundle): the int8 ``.tflite`` size (flash on a Cortex-M without NPU), the TFLite
   Micro arena measured by the host interpreter and the bundle's ``<name>_arena_size`` (arena plus
   margin), and Vela's placement and figures for ethos-u55-128;
2. ``--target micro --keep-names``: the same model with its tensor names, for the cost of names;
3. Vela (``edge_export.targets.micro.ethosu.run_vela``, the function the targets call) on the int8 file
   of (1) for the other configurations in ``--configs``: what ``--target <config>`` reports.

Parity is skipped (``validate=False``): sizes and Vela's estimates do not depend on it. Vela's
figures are its own estimates for its default system configuration and memory mode (Arm/vela.ini),
not measurements on hardware; they are deterministic, so one run suffices.

    .venv/bin/python benchmarks/embedded_sizes.py [--models small_cnn,mobilenet_v2_like,resnet_like,gated_ratio_cnn]
        [--configs ethos-u55-128,ethos-u65-256,ethos-u85-256] [--out-dir DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name -> (factory in testing_models, input shape)
MODELS = {
    "small_cnn": ("small_cnn", (1, 3, 16, 16)),
    "mobilenet_v2_like": ("mobilenet_v2_like", (1, 3, 32, 32)),
    "resnet_like": ("resnet_like", (1, 3, 32, 32)),
    "gated_ratio_cnn": ("gated_ratio_cnn", (1, 3, 16, 16)),
}


def _model(name: str):
    import testing_models

    factory, shape = MODELS[name]
    model = getattr(testing_models, factory)()
    return testing_models.random_batchnorm_stats(model), shape


def _vela_row(config: str, ethos: dict) -> dict:
    s = ethos["summary"]
    return {
        "config": config,
        "npu_operators": ethos["npu_operators"],
        "cpu_operators": ethos["cpu_operators"],
        "cpu": [f"{op['opcode']} ({op['module']})" for op in ethos["cpu"]],
        "vela_tflite_bytes": ethos["vela_model_bytes"],
        "sram_bytes": s["sram_bytes"],
        "flash_bytes": s["flash_bytes"],
        "dram_bytes": s["dram_bytes"],
        "cycles": s["cycles"],
        "inferences_per_second": round(s["inferences_per_second"], 1),
        "system_config": s["system_config"],
        "memory_mode": s["memory_mode"],
    }


def measure(name: str, configs: list[str], folder: Path) -> dict:
    import torch

    import edge_export
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.output.serialize import to_json_value
    from edge_export.targets.micro.ethosu import EthosUTarget, run_vela
    from edge_export.targets.micro.bundle import arena_with_margin

    model, shape = _model(name)
    example = (torch.randn(*shape, generator=torch.Generator().manual_seed(0)),)
    started = time.perf_counter()
    ethos_export = edge_export.export(model, example_inputs=example, output=folder / f"{name}.tflite",
                                      target=configs[0], validate=False)
    named = edge_export.export(model, example_inputs=example, output=folder / f"{name}_named.tflite",
                               target="micro", keep_names=True, no_emit_c=True, validate=False)
    seconds = time.perf_counter() - started
    report, named_report = ethos_export.report, named.report
    micro = report["target"]["micro"]
    row = {
        "model": name,
        "input": list(shape),
        "operators": report["flatbuffer"]["num_operators"],
        "stripped_tflite_bytes": report["flatbuffer"]["size_bytes"],
        "named_tflite_bytes": named_report["flatbuffer"]["size_bytes"],
        "tensor_map_bytes": (folder / f"{name}.tensors.json").stat().st_size,
        "arena_bytes": micro["arena_bytes"],
        "named_arena_bytes": named_report["target"]["micro"]["arena_bytes"],
        # --target micro's bundle constant (the arena plus margin), and the Ethos-U bundle's, which
        # also covers Vela's SRAM (plus the int8 arena when an operator stays on the CPU)
        "bundle_arena_size": arena_with_margin(micro["arena_bytes"]),
        "ethos_bundle_arena_size": micro["c_bundle"]["arena_size"],
        "vela": [_vela_row(configs[0], report["target"]["ethos_u"])],
        "export_seconds_both": round(seconds, 1),
    }
    int8 = ethos_export.tflite_path.read_bytes()
    named_model = load_flatbuffer(folder / f"{name}_named.tflite")
    for config in configs[1:]:
        # What --target <config> reports: the CPU operators found on the named model, the figures
        # of the model as written (names stripped).
        placement = EthosUTarget(config)._report(run_vela(named_model.data, config), named_model, named_model.data, folder / f"{name}.tflite")
        compiled = run_vela(int8, config)
        ethos = replace(placement, vela_model_bytes=len(compiled.data), summary=compiled.summary)
        row["vela"].append(_vela_row(config, to_json_value(ethos)))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--configs", default="ethos-u55-128,ethos-u65-256,ethos-u85-256")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep the exported files here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    configs = args.configs.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            row = measure(name, configs, folder)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
