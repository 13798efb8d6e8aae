"""The micro target's firmware bundle (--emit-c): compiled with the system C++ compiler.

Every generated file that needs no TFLite Micro header is compiled and linked into small programs
that print what the firmware would see (the array's bytes, its address mod 16, the test vectors);
the files that include TFLite Micro are parsed against a stub of the few declarations they use, so
that a typo in the generator fails here rather than in a firmware build.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_harness import read_report
from model_zoo import small_cnn

from edge_export.errors import UsageError
from edge_export.targets.micro.kernels import TFLM_CUSTOM_OP_METHODS, TFLM_OP_RESOLVER_METHODS
from edge_export.targets.micro.runner import MicroRunner
from edge_export.targets.micro.bundle import (
    ARENA_MARGIN_MIN_BYTES,
    BUNDLE_SUFFIXES,
    arena_with_margin,
    c_identifier,
)

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
STEM = "8bit-cnn"  # not a C identifier: the bundle is named model_8bit_cnn
NAME = "model_8bit_cnn"


def _compiler() -> str:
    found = shutil.which("g++")
    if found is None:
        pytest.fail("g++ is not on PATH: the C bundle tests compile the generated files; install g++ (apt-get install g++).")
    return found


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """One micro export of the test CNN through the API, bundle in the default folder."""
    from edge_export import export

    folder = tmp_path_factory.mktemp("bundle")
    result = export(
        small_cnn(), example_inputs=(X,), output=folder / f"{STEM}.tflite", target="micro", calibration_samples=16, samples=2,
        quant_backend="flatbuffer",  # what auto keeps for this model, without also running PT2E: the bundle is the point
    )
    assert result.exit_code == 0
    return result, folder / f"{STEM}_micro"


# ---- names and the arena margin -----------------------------------------------------------------


@pytest.mark.parametrize(
    "stem, name",
    [
        ("cnn", "cnn"),
        ("my-model.v2", "my_model_v2"),
        ("8bit", "model_8bit"),
        ("int", "model_int"),
        ("__Reserved", "Reserved"),
        ("a__b", "a_b"),
        ("___", "model"),
        ("ünïcode", "n_code"),
        ("main", "model_main"),
    ],
)
def test_c_identifier(stem, name):
    assert c_identifier(stem) == name
    assert name.isidentifier() and name.isascii() and "__" not in name and not name.startswith("_")


@pytest.mark.parametrize(
    "measured, size",
    [(6880, 6880 + 1024), (100_000, 110_000), (100_001, 110_016), (0, ARENA_MARGIN_MIN_BYTES)],
)
def test_arena_margin(measured, size):
    assert arena_with_margin(measured) == size and size % 16 == 0


# ---- the bundle of a real export ----------------------------------------------------------------


def test_bundle_files_and_report(bundle):
    result, folder = bundle
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(NAME + s for s in BUNDLE_SUFFIXES)
    section = result.report["target"]["micro"]["c_bundle"]
    assert section["name"] == NAME and section["folder"] == str(folder)
    assert section["arena_measured_bytes"] == result.report["target"]["micro"]["arena_bytes"]
    assert section["arena_size"] == arena_with_margin(section["arena_measured_bytes"])
    assert result.report["artifacts"]["c_model_data_cc"] == str(folder / f"{NAME}_model_data.cc")
    header = (folder / f"{NAME}_model_data.h").read_text()
    sha = hashlib.sha256(result.tflite_path.read_bytes()).hexdigest()
    assert f"sha256 {sha}" in header
    assert "verdict passed, worst output SQNR" in header
    assert f"constexpr unsigned int {NAME}_arena_size = {section['arena_size']};" in header


def test_model_array_compiles_and_equals_the_tflite(bundle, tmp_path):
    result, folder = bundle
    cxx = _compiler()
    for source in (f"{NAME}_model_data.cc", f"{NAME}_test_data.cc"):
        _run(cxx, "-std=c++17", "-Wall", "-Werror", "-c", folder / source, "-o", tmp_path / (source + ".o"))
    main = tmp_path / "dump.cc"
    main.write_text(
        f'#include <cstdint>\n#include <cstdio>\n#include "{NAME}_model_data.h"\n'
        "int main(int argc, char** argv) {\n"
        '  std::FILE* f = std::fopen(argv[1], "wb");\n'
        f"  std::fwrite({NAME}_model_data, 1, {NAME}_model_data_len, f);\n"
        "  std::fclose(f);\n"
        f'  std::printf("%u %u %u\\n", {NAME}_model_data_len,\n'
        f"              static_cast<unsigned>(reinterpret_cast<std::uintptr_t>({NAME}_model_data) % 16),\n"
        f"              {NAME}_arena_size);\n"
        "  return 0;\n}\n"
    )
    exe = tmp_path / "dump"
    _run(cxx, "-std=c++17", "-Wall", "-Werror", "-I", folder, main, folder / f"{NAME}_model_data.cc", "-o", exe)
    length, address_mod_16, arena = map(int, _run(exe, tmp_path / "model.bin").split())
    tflite = result.tflite_path.read_bytes()
    assert (tmp_path / "model.bin").read_bytes() == tflite
    assert length == len(tflite)
    assert address_mod_16 == 0
    assert arena == result.report["target"]["micro"]["c_bundle"]["arena_size"]


def test_test_vectors_are_the_host_tflm_outputs(bundle, tmp_path):
    """The compiled C arrays, read back: the inputs run through TFLite Micro's host interpreter give
    exactly the expected outputs the bundle holds (int8, the model's own layout)."""
    result, folder = bundle
    cxx = _compiler()
    main = tmp_path / "vectors.cc"
    main.write_text(
        f'#include <cstdint>\n#include <cstdio>\n#include "{NAME}_test_data.h"\n'
        "int main(int argc, char** argv) {\n"
        '  std::FILE* f = std::fopen(argv[1], "wb");\n'
        f"  std::fwrite({NAME}_test_input_0, 1, sizeof({NAME}_test_input_0), f);\n"
        "  std::fclose(f);\n"
        '  f = std::fopen(argv[2], "wb");\n'
        f"  std::fwrite({NAME}_test_expected_output_0, 1, sizeof({NAME}_test_expected_output_0), f);\n"
        "  std::fclose(f);\n"
        f'  std::printf("%u %u %d %u\\n", {NAME}_test_vector_count, {NAME}_test_input_count, {NAME}_test_tolerance,\n'
        f"              static_cast<unsigned>(reinterpret_cast<std::uintptr_t>({NAME}_test_input_0) % 16));\n"
        "  return 0;\n}\n"
    )
    exe = tmp_path / "vectors"
    _run(cxx, "-std=c++17", "-Wall", "-Werror", "-I", folder, main, folder / f"{NAME}_test_data.cc", "-o", exe)
    count, n_inputs, tolerance, address_mod_16 = map(int, _run(exe, tmp_path / "in.bin", tmp_path / "out.bin").split())
    assert count == 3 and n_inputs == 1 and tolerance == 1 and address_mod_16 == 0

    runner = MicroRunner(result.tflite_path.read_bytes())
    (inp,), (out,) = runner.inputs, runner.outputs
    assert inp.dtype == "int8" and out.dtype == "int8"
    inputs = np.fromfile(tmp_path / "in.bin", dtype=np.int8).reshape(count, *inp.shape)
    expected = np.fromfile(tmp_path / "out.bin", dtype=np.int8).reshape(count, *out.shape)
    assert len(np.unique(inputs)) > 100  # the whole int8 range, not zeros
    for vector, want in zip(inputs, expected):
        np.testing.assert_array_equal(runner.run_raw([vector])[0], want)


def _stub_tflm(root: Path) -> Path:
    """The declarations of TFLite Micro the bundle uses, as its headers name them (signatures as
    in tflite-micro's micro_interpreter.h, micro_mutable_op_resolver.h and micro_log.h)."""
    methods = sorted({*TFLM_OP_RESOLVER_METHODS.values(), *TFLM_CUSTOM_OP_METHODS.values()})
    micro = root / "tensorflow" / "lite" / "micro"
    micro.mkdir(parents=True)
    (root / "tensorflow" / "lite" / "schema").mkdir(parents=True)
    common = (
        "#pragma once\n#include <cstddef>\n#include <cstdint>\n"
        "typedef enum TfLiteStatus { kTfLiteOk = 0, kTfLiteError = 1 } TfLiteStatus;\n"
        "typedef union TfLitePtrUnion { int32_t* i32; float* f; char* raw; const char* raw_const; int8_t* int8; } TfLitePtrUnion;\n"
        "typedef struct TfLiteTensor { int type; TfLitePtrUnion data; size_t bytes; } TfLiteTensor;\n"
    )
    (micro / "stub_common.h").write_text(common)
    (micro / "micro_mutable_op_resolver.h").write_text(
        '#pragma once\n#include "tensorflow/lite/micro/stub_common.h"\nnamespace tflite {\n'
        "class MicroOpResolver {};\n"
        "template <unsigned int tOpCount>\nclass MicroMutableOpResolver : public MicroOpResolver {\n public:\n"
        + "".join(f"  TfLiteStatus {m}();\n" for m in methods)
        + "};\n}  // namespace tflite\n"
    )
    (micro / "micro_log.h").write_text("#pragma once\nvoid MicroPrintf(const char* format, ...);\n")
    (root / "tensorflow" / "lite" / "schema" / "schema_generated.h").write_text(
        "#pragma once\n#include <cstdint>\nnamespace tflite {\n"
        "struct Model { uint32_t version() const; };\n"
        "const Model* GetModel(const void* buf);\n}  // namespace tflite\n"
    )
    (micro / "micro_interpreter.h").write_text(
        '#pragma once\n#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"\n'
        '#include "tensorflow/lite/schema/schema_generated.h"\nnamespace tflite {\n'
        "class MicroResourceVariables;\nclass MicroProfilerInterface;\n"
        "class MicroInterpreter {\n public:\n"
        "  MicroInterpreter(const Model* model, const MicroOpResolver& op_resolver, uint8_t* tensor_arena,\n"
        "                   size_t tensor_arena_size, MicroResourceVariables* resource_variables = nullptr,\n"
        "                   MicroProfilerInterface* profiler = nullptr, bool preserve_all_tensors = false);\n"
        "  TfLiteStatus AllocateTensors();\n  TfLiteStatus Invoke();\n"
        "  TfLiteTensor* input(size_t index);\n  TfLiteTensor* output(size_t index);\n"
        "};\n}  // namespace tflite\n"
    )
    return root


def test_tflm_sources_parse_against_stub_headers(bundle, tmp_path):
    result, folder = bundle
    cxx = _compiler()
    stub = _stub_tflm(tmp_path / "stub")
    flags = ["-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I", stub, "-I", folder]
    _run(cxx, *flags, folder / f"{NAME}_test.cc")
    # The op resolver header alone, included twice (its guard), called with the resolver it names.
    ops = result.report["target"]["micro"]["ops"]
    uses = tmp_path / "uses_resolver.cc"
    uses.write_text(
        f'#include "{NAME}_op_resolver.h"\n#include "{NAME}_op_resolver.h"\n'
        f"static tflite::MicroMutableOpResolver<{len(ops)}> resolver;\n"
        f"TfLiteStatus f() {{ return {NAME}_register_ops(resolver); }}\n"
    )
    _run(cxx, *flags, uses)
    # A typo in a registration is caught: the stub declares only real AddXxx methods.
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    header = broken / f"{NAME}_op_resolver.h"
    header.write_text(header.read_text().replace("AddConv2D", "AddConv2d"))
    proc = subprocess.run([cxx, *map(str, flags[:-1]), str(broken), str(uses)], check=False, capture_output=True, text=True)
    assert proc.returncode != 0 and "AddConv2d" in proc.stderr


# ---- options and failures -----------------------------------------------------------------------


def test_no_emit_c_writes_no_bundle(tmp_path, run_cli, micro_pt2):
    out = tmp_path / "m.tflite"
    res = run_cli(micro_pt2, "--target", "micro", "--no-emit-c", "--no-validate", "--calibration-samples", "8",
                  "--quant-backend", "flatbuffer", "-o", out)
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "m_micro").exists()
    assert "c_bundle" not in read_report(out)["target"]["micro"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--emit-c", "fw"], "--target micro"),
        (["--no-emit-c"], "--target micro"),
        (["--target", "edgetpu", "--emit-c", "fw"], "--target micro"),
        (["--target", "micro", "--emit-c", "fw", "--no-emit-c"], "contradict"),
        (["--target", "micro", "--emit-c", "{tmp}/x.tflite"], "the path of the .tflite itself"),
    ],
)
def test_emit_c_refused(tmp_path, run_cli, micro_pt2, args, needle):
    res = run_cli(micro_pt2, *(a.replace("{tmp}", str(tmp_path)) for a in args), "-o", tmp_path / "x.tflite")
    assert res.exit_code == 2 and needle in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["micro.pt2"]


def test_unwritable_or_file_emit_c_is_exit_2_before_work(tmp_path, run_cli, micro_pt2):
    in_the_way = tmp_path / "fw.txt"
    in_the_way.write_text("not a folder")
    res = run_cli(micro_pt2, "--target", "micro", "--emit-c", in_the_way, "-o", tmp_path / "x.tflite")
    assert res.exit_code == 2 and "is a file, not a folder" in res.stderr, res.stderr
    assert "Loading" not in res.stderr + res.stdout
    # A folder that cannot be created (its parent is a file): also refused before any work.
    res = run_cli(micro_pt2, "--target", "micro", "--emit-c", in_the_way / "fw", "-o", tmp_path / "x.tflite")
    assert res.exit_code == 2 and "Cannot write" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fw.txt", "micro.pt2"]


def test_bundle_is_not_left_when_the_export_fails(tmp_path, run_cli, micro_pt2):
    """A failure after the bundle folder was created (here: inputs the model cannot take, found
    while loading) leaves nothing, not even the folder."""
    res = run_cli(micro_pt2, "--target", "micro", "--emit-c", tmp_path / "fw" / "deeper", "-o", tmp_path / "x.tflite",
                  "--input-shape", "1,5,16,16")
    assert res.exit_code == 2, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["micro.pt2"]


def test_bundle_cannot_replace_an_input(tmp_path):
    from edge_export import export

    folder = tmp_path / "fw"
    folder.mkdir()
    weights = folder / f"{NAME}_model_data.cc"
    weights.write_text("// mine")
    with pytest.raises(UsageError, match="replace that input"):
        export(small_cnn(), example_inputs=(X,), output=tmp_path / f"{STEM}.tflite", target="micro",
               emit_c=str(folder), calibration_data=str(weights))
    assert weights.read_text() == "// mine"


@pytest.fixture
def micro_pt2(tmp_path):
    src = tmp_path / "micro.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    return src


def test_renderers_name_the_bundle():
    """The terminal summary and the Markdown report say where the bundle is and the arena to reserve."""
    import dataclasses

    from report_fixtures import skipped_report
    from rich.console import Console

    from edge_export.reports.markdown import render_markdown
    from edge_export.targets.micro.report import CBundleSection
    from edge_export.output.serialize import to_json_value
    from edge_export.reports.summary import print_summary

    report = skipped_report()
    bundle = CBundleSection("tiny_micro", "tiny", tuple(f"tiny{s}" for s in BUNDLE_SUFFIXES), 8192, 9024, 3, 1)
    micro = dataclasses.replace(report.target.micro, c_bundle=bundle)
    report = dataclasses.replace(report, target=dataclasses.replace(report.target, micro=micro))
    out = Console(record=True, width=300, highlight=False, soft_wrap=True, force_terminal=False)
    print_summary(report, out, Console(record=True, width=300, force_terminal=False))
    assert "  firmware bundle: tiny_micro/ (tiny_*; arena 9024 bytes with margin)\n" in out.export_text()
    markdown = render_markdown(report)
    assert r"Firmware bundle in <code>tiny\_micro</code>: tiny\_model\_data\.h, tiny\_model\_data\.cc," in markdown
    assert r"<code>tiny\_arena\_size</code> = 9024 bytes (8192 measured plus the margin); 3 test vectors, tolerance 1 step." in markdown
    assert to_json_value(report)["target"]["micro"]["c_bundle"]["arena_size"] == 9024
