"""Mutations of real TorchScript archives for the reader's fuzzers (tests/test_torchscript_fuzz.py,
benchmarks/torchscript_fuzz.py): operator names swapped in the code (among them the ones that reach
outside the model), statements added, code and pickle bytes flipped, members renamed, added, doubled
or cut, archives truncated."""

from __future__ import annotations

import io
import random
import re
import zipfile
from pathlib import Path

# Operators a hostile archive would reach for, and names of every other kind the code may hold.
OPERATORS = [
    "from_file", "save", "set_", "add", "relu", "mul", "ops.myns.op", "ops.prim.Print", "ops.quantized.conv2d",
    "ops.aten.from_file", "nonexistent_op", "_C", "jit", "classes", "ops", "__import__",
]
_CALL = re.compile(rb"torch\.[A-Za-z_][A-Za-z0-9_]*\(")


def build_sources(folder: Path) -> list[Path]:
    """Three clean archives: scripted control flow (a NamedTuple, a dict, interpolate and pad from
    torch's own scripted functions), a scripted LSTM + attention encoder, and a traced CNN."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Control(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.norm = nn.BatchNorm2d(4)

        def forward(self, x):
            h = F.relu(self.norm(self.conv(x)))
            h = F.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
            return F.pad(h, (1, 1, 1, 1), mode="reflect").softmax(-1)

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 8, batch_first=True)
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            h, _ = self.lstm(x)
            return self.attention(h, h, h)[0]

    torch.manual_seed(0)
    paths = [folder / "control.pt", folder / "sequence.pt", folder / "traced.pt"]
    torch.jit.save(torch.jit.script(Control().eval()), str(paths[0]))
    torch.jit.save(torch.jit.script(Sequence().eval()), str(paths[1]))
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.PReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).eval()
    torch.jit.save(torch.jit.trace(cnn, torch.randn(1, 3, 8, 8)), str(paths[2]))
    return paths


def members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(info.filename, zf.read(info)) for info in zf.infolist()]


def write(items: list[tuple[str, bytes]]) -> bytes:
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as zf:
        warnings.simplefilter("ignore", UserWarning)  # a doubled member is one of the mutations
        for name, data in items:
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def _swap_operator(rng: random.Random, items: list) -> str:
    code = [i for i, (n, d) in enumerate(items) if n.endswith(".py") and _CALL.search(d)]
    index = rng.choice(code)
    name, data = items[index]
    calls = list(_CALL.finditer(data))
    call = rng.choice(calls)
    new = rng.choice(OPERATORS)
    replacement = (new if new.startswith("ops.") else f"torch.{new}").encode() + b"("
    items[index] = (name, data[: call.start()] + replacement + data[call.end():])
    return f"operator:{new}"


def _add_statement(rng: random.Random, items: list) -> str:
    index = rng.choice([i for i, (n, _) in enumerate(items) if n.endswith(".py")])
    name, data = items[index]
    line = rng.choice([b"import os", b"x = torch.from_file('/etc/passwd')", b"torch.relu(1)", b"def f(): return 1", b"class Y(Module):\n  pass"])
    items[index] = (name, data + b"\n" + line + b"\n")
    return "statement"


def _flip(rng: random.Random, items: list, suffix: str) -> str:
    index = rng.choice([i for i, (n, _) in enumerate(items) if n.endswith(suffix)])
    name, data = items[index]
    if data:
        blob = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        items[index] = (name, bytes(blob))
    return f"flip{suffix}"


def _members(rng: random.Random, items: list) -> str:
    choice = rng.randrange(4)
    index = rng.randrange(len(items))
    name, data = items[index]
    root = name.split("/", 1)[0]
    if choice == 0:
        items[index] = (rng.choice([f"{root}/code/../../evil.py", f"{root}/extra_code.py", f"other/{name.split('/', 1)[-1]}", f"{root}/code/__torch__/\u202e.py"]), data)
    elif choice == 1:
        items.append((name, data))
    elif choice == 2:
        del items[index]
    else:
        items[index] = (name, data[: rng.randrange(len(data) + 1)])
    return f"member{choice}"


def mutate(rng: random.Random, source: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """One mutated archive: (what was done, the zip's bytes; some cut short)."""
    items = list(source)
    kind = rng.choice(["operator", "operator", "operator", "statement", "flip.py", "flip.pkl", "members", "truncate"])
    if kind == "operator":
        what = _swap_operator(rng, items)
    elif kind == "statement":
        what = _add_statement(rng, items)
    elif kind.startswith("flip"):
        what = _flip(rng, items, kind[4:])
    elif kind == "members":
        what = _members(rng, items)
    else:
        data = write(items)
        return "truncate", data[: rng.randrange(len(data))]
    return what, write(items)


def reaches_outside(data: bytes) -> bool:
    """The archive's code names an operator that reads or writes files (then the reader must refuse)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            code = b"".join(zf.read(n) for n in zf.namelist() if n.endswith(".py"))
    except Exception:  # not a readable zip: the reader refuses it whatever it holds
        return False
    return b"from_file" in code or b"torch.save(" in code
