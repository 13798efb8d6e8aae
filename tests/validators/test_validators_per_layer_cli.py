"""--per-layer through the CLI: the report, Markdown and JUnit point at a damaged layer."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import torch
from torch import nn

from cli_harness import read_report

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = self.act2(self.conv2(self.act1(self.conv1(x))))
        return self.head(y.mean(dim=(2, 3)))


def test_per_layer_points_at_damaged_layer(tmp_path, run_cli):
    torch.manual_seed(0)
    good = Net().eval()
    src = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(good, (X,)), src)
    # A flatbuffer exported from a copy whose conv2 weights were damaged, checked against the original.
    damaged = Net().eval()
    damaged.load_state_dict(good.state_dict())
    with torch.no_grad():
        damaged.conv2.weight.mul_(-1.0)
    bad_src = tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(damaged, (X,)), bad_src)
    bad = tmp_path / "bad.tflite"
    assert run_cli(bad_src, "-o", bad, "--no-validate").exit_code == 0

    xml, png = tmp_path / "layers.xml", tmp_path / "layers.png"
    res = run_cli("validate", bad, "--reference", src, "--per-layer", "--junit", xml, "--per-layer-plot", png)
    assert res.exit_code == 1
    import json

    from cli_harness import validate_report

    rep = validate_report(json.loads((tmp_path / "bad.validate.report.json").read_text()))
    layers = rep["per_layer"]
    # conv2 and its ReLU are one fused CONV_2D op in the flatbuffer, which carries act2's name
    jump = layers["first_jump"]
    assert jump["module_path"] in ("conv2", "act2") or "conv2" in jump["fused_modules"]
    before = [r for r in layers["layers"] if r["module_path"].startswith(("conv1", "act1"))]
    assert before and all(r["sqnr_db"] > 60 for r in before)
    md = (tmp_path / "bad.validate.report.md").read_text()
    assert "likely culprit" in md and jump["module_path"] in md.split("likely culprit")[0].rsplit("jumps at", 1)[1]
    cases = ET.parse(xml).getroot().find("testsuite").findall("testcase")
    layer_cases = [c for c in cases if c.get("classname") == "edge_export.parity.layers"]
    assert len(layer_cases) == len(layers["layers"])
    flagged = [c.get("name") for c in layer_cases if c.find("failure") is not None]
    assert any("conv2" in n or "act2" in n for n in flagged)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_per_layer_on_export_clean_model(tmp_path, run_cli):
    torch.manual_seed(0)
    # a pickled nn.Module keeps its module tree through the channels-last wrapper
    src = tmp_path / "net.pt"
    torch.save(Net().eval(), src)
    out = tmp_path / "net.tflite"
    res = run_cli(src, "--trust-pickle", "--input-shape", "1,3,16,16", "-o", out, "--per-layer", "--per-layer-min-sqnr", "60", "--channels-last")
    assert res.exit_code == 0, res.stderr
    layers = read_report(out)["per_layer"]
    assert layers["passed"] is True and layers["first_jump"] is None
    assert layers["match_fraction"] > 0.5 and all(r["sqnr_db"] > 60 for r in layers["layers"])
    assert "per-layer:" in res.stdout


def test_per_layer_plot_needs_per_layer(tmp_path, run_cli):
    res = run_cli(tmp_path / "x.pt2", "--per-layer-plot", tmp_path / "p.png")
    assert res.exit_code == 2 and "--per-layer" in res.stderr
