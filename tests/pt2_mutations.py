"""Structure-aware mutations of a real .pt2 archive, for benchmarks/pt2_fuzz.py and its test.

Each mutation edits what an attacker controls (member names, duplicates, the program JSON's fields,
symbolic expressions, payload configs, sizes and bytes) and, where it can, carries a payload that
creates ``marker`` (a folder): a marker that exists after a case means code ran.
"""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path
from typing import Any, Callable

from hostile_archives import dotless_expression, python_call

Entries = list[tuple[str, bytes]]


def _payload_strings(marker: Path) -> list[str]:
    call = python_call(marker)
    return [
        call, dotless_expression(marker), f'x", None) or {dotless_expression(marker)} or getattr(self, "y',
        "10**10**10", "9" * 5000, "(" * 300 + ")" * 300, "\x1b[2J\x1b[H", "s0\n#error", "../../etc/passwd",
        "", "Symbol('s0')", "Symbol('s0').__class__", "Integer(-1)", "FloorDiv(s0, 0)", "Mod(s0, Integer(0))",
        "Max(s0, s0, s0)", "s0**64", "s0**65", "Pow(s0, Integer(3))", "-s0", "é", "\u202e", "s0 //",
    ]


def _walk(node: Any, path: tuple = ()) -> list[tuple]:
    paths = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            paths += _walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            paths += _walk(v, path + (i,))
    return paths


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def _set(node: Any, path: tuple, value: Any) -> None:
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _random_value(rng: random.Random, marker: Path) -> Any:
    choice = rng.randrange(8)
    if choice == 0:
        return rng.choice(_payload_strings(marker))
    if choice == 1:
        return rng.choice([0, -1, 1, 2**31, 2**63, -(2**63), 10**30, 7, 29, 35])
    if choice == 2:
        return rng.choice([1.5, -0.0, 1e308, True, False, None])
    if choice == 3:
        return [rng.choice(_payload_strings(marker))]
    if choice == 4:
        return {rng.choice(["as_int", "as_expr", "evil", "as_custom_obj", "__class__"]): rng.choice([1, "s0", {"expr_str": python_call(marker)}])}
    if choice == 5:
        return {}
    if choice == 6:
        return []
    return "".join(rng.choice("abcs0123._-\"'(),*/\\ ") for _ in range(rng.randrange(1, 40)))


def _edit_json(entries: Entries, tail: str, edit: Callable[[Any], None]) -> Entries:
    out = []
    for name, data in entries:
        if "/" in name and name.split("/", 1)[1] == tail:
            try:
                doc = json.loads(data)
            except ValueError:  # an earlier mutation broke it: leave it broken
                doc = None
            if isinstance(doc, (dict, list)) and len(_walk(doc)) > 1:
                edit(doc)
                data = json.dumps(doc).encode()
        out.append((name, data))
    return out


def mutate_json_field(entries: Entries, rng: random.Random, marker: Path, tail: str = "models/model.json") -> Entries:
    def edit(doc: Any) -> None:
        path = rng.choice([p for p in _walk(doc) if p])
        action = rng.randrange(4)
        parent = _get(doc, path[:-1])
        if action == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == 1 and isinstance(parent, dict):
            parent[rng.choice(["smuggled", "__reduce__", "expr_str", "guards_code"])] = _random_value(rng, marker)
        else:
            _set(doc, path, _random_value(rng, marker))

    return _edit_json(entries, tail, edit)


def mutate_expression(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    def edit(doc: Any) -> None:
        paths = [p for p in _walk(doc) if p and p[-1] == "expr_str"]
        if not paths:
            return
        for path in rng.sample(paths, k=min(len(paths), rng.randrange(1, 3))):
            _set(doc, path, rng.choice(_payload_strings(marker)))

    return _edit_json(entries, "models/model.json", edit)


def mutate_weights_config(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    return mutate_json_field(entries, rng, marker, "data/weights/model_weights_config.json")


def rename_member(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    i = rng.randrange(len(entries))
    name, data = entries[i]
    root, tail = name.split("/", 1) if "/" in name else (name, "x")
    new_tail = rng.choice([
        tail.upper(), tail + ".bak", tail.replace(".json", ".JSON"), "models/" + tail.rsplit("/", 1)[-1],
        "../" + tail, tail + "/x", "extra/" + tail, tail.replace("model", "evil"), tail + "\x00", " " + tail,
        "data/weights/weight_99", "models/model2.json", "data/constants/custom_obj_0", "data/constants/tensor_0",
    ])
    out = list(entries)
    out[i] = (f"{root}/{new_tail}", data)
    return out


def duplicate_member(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    if not entries:
        return entries
    name, data = rng.choice(entries)
    poisoned = mutate_expression(entries, rng, marker)
    data2 = dict(poisoned).get(name, data)
    return ([(name, data2)] + entries) if rng.random() < 0.5 else (entries + [(name, data2)])


def drop_member(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    out = list(entries)
    if len(out) > 1:
        del out[rng.randrange(len(out))]
    return out


def add_member(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    root = entries[0][0].split("/", 1)[0] if entries else "archive"
    poisoned = dict(mutate_expression(entries, rng, marker))
    program = next((d for n, d in poisoned.items() if n.endswith("models/model.json")), b"{}")
    name = rng.choice(["models/evil.json", "models/a", "extra/x.json", "data/weights/weight_7", "other_root/models/model.json"])
    full = name if name.startswith("other_root") else f"{root}/{name}"
    return entries + [(full, program)]


def resize_payload(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    out = []
    for name, data in entries:
        if "/data/" in name and rng.random() < 0.5:
            data = rng.choice([data[: len(data) // 2], data + b"\0" * rng.randrange(1, 5000), b"", data[::-1]])
        out.append((name, data))
    return out


def flip_bytes(entries: Entries, rng: random.Random, marker: Path) -> Entries:
    i = rng.randrange(len(entries))
    name, data = entries[i]
    if data:
        b = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        data = bytes(b)
    out = list(entries)
    out[i] = (name, data)
    return out


MUTATIONS: dict[str, Callable[[Entries, random.Random, Path], Entries]] = {
    "json-field": mutate_json_field,
    "expression": mutate_expression,
    "weights-config": mutate_weights_config,
    "rename-member": rename_member,
    "duplicate-member": duplicate_member,
    "drop-member": drop_member,
    "add-member": add_member,
    "resize-payload": resize_payload,
    "flip-bytes": flip_bytes,
}


def write_case(entries: Entries, path: Path, rng: random.Random) -> Path:
    """Write the mutant (sometimes deflated, sometimes truncated after writing)."""
    import warnings

    compression = zipfile.ZIP_DEFLATED if rng.random() < 0.2 else zipfile.ZIP_STORED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(path, "w", compression) as zf:
            for name, data in entries:
                zf.writestr(name, data)
    if rng.random() < 0.03:
        raw = path.read_bytes()
        path.write_bytes(raw[: rng.randrange(1, len(raw))])
    return path
