"""An allow-list reader for untrusted ExportedProgram archives (.pt2): what a member may be, decided
before torch sees a byte.

``torch.export.load`` is documented as unsafe for untrusted files: it unpickles members, passes every
symbolic shape to ``sympy.sympify`` (which evaluates Python), compiles guard strings into a function,
and writes parameter names unescaped into generated source. A check that looks for known-bad members
misses the next trick (a program member not named ``*.json``, a name stored twice in the zip with
torch's reader taking the first and Python's the last, a parameter name that breaks out of
``getattr(self, "...")``). So this reader decides what an archive *may* hold and refuses the rest:

- the zip: one root folder, no duplicate names, names of the form the format defines, no encryption,
  stored or deflated members whose declared sizes are within limits (checked from the central
  directory before a byte is inflated, then enforced while reading);
- the members: exactly the set the archive's format version (torch 2.8+, ``archive_version`` 0)
  defines for the models it lists: ``models/<m>.json``, ``data/sample_inputs/<m>.pt``, the weights and
  constants configs and the payload files those configs name, and the five format files;
- the program JSON: parsed against the schema dataclasses of the torch in use (unknown keys, wrong
  types and custom objects refused), every symbolic expression through ``symbolic_expressions`` (never
  sympify), every parameter, buffer and constant name a dotted Python identifier, every node target a
  PyTorch operator name, no guard code;
- the payloads: raw tensors exactly as large as their metadata says; pickled tensors and sample
  inputs loadable by torch's ``weights_only`` unpickler (tensors and plain containers only).

``read_checked_archive`` returns the checked members, and ``CheckedArchive.canonical_bytes`` writes
them as a fresh zip that torch reads instead of the user's file: torch never sees bytes this module
did not check. Size limits: see ``ArchiveLimits`` (README, "Security").
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError
from .pt2_refusals import DOTTED_NAME, RATIO_ENV, UnsafeArchiveMember, refusal  # noqa: F401  (re-exported)

__all__ = ["ArchiveLimits", "CheckedArchive", "UnsafeArchiveMember", "read_checked_archive", "DISABLE_CHECKS_ENV"]

# Test hook: with this set, the allow-list reader is skipped (tests/test_sandbox.py shows the sandbox
# alone keeps payloads inert). Never set in normal use.
DISABLE_CHECKS_ENV = "EDGE_EXPORT_TEST_DISABLE_ARCHIVE_CHECKS"

_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_.][A-Za-z0-9_.-]{0,127}){1,4}")
_MODEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PAYLOAD_NAME = {"data/weights/": re.compile(r"weight_[0-9]{1,9}"), "data/constants/": re.compile(r"tensor_[0-9]{1,9}")}
_FORMAT_FILES = {"archive_format": b"pt2", "archive_version": b"0", "byteorder": b"little"}
_FREE_FORMAT_FILES = {".data/version": re.compile(rb"[0-9]{1,4}"), ".data/serialization_id": re.compile(rb"[0-9]{1,64}")}


@dataclass(frozen=True)
class ArchiveLimits:
    """Sizes an archive may declare. A deflated member may inflate to ``inflate_ratio`` times its
    compressed size (small members excepted), and all members together to ``inflate_ratio`` times
    the file's size: a model's weights do not compress, so honest archives are near 1x.
    Raw tensors must be exactly as large as their metadata says; sample inputs at most
    ``sample_input_slack`` bytes beyond the inputs the graph declares."""

    inflate_ratio: float = 10.0
    small_member: int = 1 << 20
    max_members: int = 100_000
    max_json_bytes: int = 256 << 20
    sample_input_slack: int = 1 << 20

    @classmethod
    def from_environment(cls) -> "ArchiveLimits":
        raw = os.environ.get(RATIO_ENV)
        if raw is None:
            return cls()
        try:
            ratio = float(raw)
        except ValueError:
            ratio = float("nan")
        if not 1.0 <= ratio <= 1000.0:  # also false for NaN
            from ..errors import UsageError

            raise UsageError(f"{RATIO_ENV}={raw!r} is not a number from 1 to 1000.", f"Unset {RATIO_ENV} or set it to, e.g., 20.")
        return cls(inflate_ratio=ratio)


@dataclass(frozen=True)
class CheckedArchive:
    root: str
    members: dict[str, bytes]  # tail (name inside the root folder) -> the checked bytes

    def canonical_bytes(self) -> bytes:
        """The checked members as a new zip (stored, one entry each): what torch reads."""
        return canonical_zip(self.root, self.members)


def canonical_zip(root: str, members: dict[str, bytes]) -> bytes:
    """``members`` (tail -> bytes) as a fresh zip under ``root``, stored, one entry each."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for tail, data in members.items():
            zf.writestr(f"{root}/{tail}", data)
    return buf.getvalue()


def read_checked_archive(path: Path, limits: ArchiveLimits | None = None) -> CheckedArchive:
    """Read and check the archive at ``path`` once; every refusal is an UnsafeArchiveMember naming the
    member and the rule."""
    limits = limits or ArchiveLimits.from_environment()
    size = path.stat().st_size
    with path.open("rb") as fh, zipfile.ZipFile(fh) as zf:
        infos = checked_directory(path, zf, size, limits)
        root = infos[0].filename.split("/", 1)[0]
        tails = {info.filename.split("/", 1)[1]: info for info in infos}
        models = _model_names(path, tails)
        expected = _expected_members(path, zf, root, tails, models, limits)
        for tail in tails:
            if tail not in expected:
                raise refusal(path, f"{root}/{tail}", "is not one the archive format defines")
        members = {tail: read_member(path, zf, tails[tail], expected[tail]) for tail in sorted(expected)}
    for tail, pattern in {**{k: re.compile(re.escape(v)) for k, v in _FORMAT_FILES.items()}, **_FREE_FORMAT_FILES}.items():
        if tail in members and not pattern.fullmatch(members[tail].strip()):
            raise refusal(path, f"{root}/{tail}", "does not hold the value the format defines")
    for model in models:
        _check_model(path, root, model, members, limits)
    return CheckedArchive(root, members)


def checked_directory(
    path: Path, zf: zipfile.ZipFile, size: int, limits: ArchiveLimits, refuse: Any = refusal, names: re.Pattern = _MEMBER_NAME,
) -> list[zipfile.ZipInfo]:
    """The zip's members, each checked from the central directory before a byte is inflated (names,
    duplicates, one root folder, methods, declared sizes); ``refuse`` words the error for the format."""
    infos = zf.infolist()
    if not infos or len(infos) > limits.max_members:
        raise refuse(path, "(the zip directory)", f"lists {len(infos)} members (1 to {limits.max_members} allowed)")
    seen: set[str] = set()
    roots = set()
    total = 0
    for info in infos:
        name = info.filename
        if name in seen:
            raise refuse(path, _shown(name), "appears twice in the zip directory (readers disagree on which one counts)")
        seen.add(name)
        if not names.fullmatch(name) or "/../" in f"/{name}/" or "/./" in f"/{name}/":
            raise refuse(path, _shown(name), "has a name of a form the archive format does not use")
        roots.add(name.split("/", 1)[0])
        if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise refuse(path, name, "is encrypted or compressed with a method the format does not use")
        ceiling = max(limits.small_member, info.compress_size * limits.inflate_ratio)
        if info.file_size > ceiling or (info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size):
            raise refuse(path, name, f"declares {info.file_size} bytes from {info.compress_size} compressed", size=True)
        total += info.file_size
    if total > size * limits.inflate_ratio + limits.small_member:
        raise refuse(path, "(the zip directory)", f"declares {total} bytes in all, more than {limits.inflate_ratio:g}x the file", size=True)
    if len(roots) != 1:
        raise refuse(path, "(the zip directory)", "has members in more than one root folder")
    return infos


def _shown(name: str) -> str:
    from ..output.text_safety import for_terminal

    return for_terminal(name[:120])


def read_member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, refuse: Any = refusal) -> bytes:
    """The member's bytes, never more than ``limit`` (a lying header cannot inflate past it)."""
    if info.file_size > limit:
        raise refuse(path, info.filename, f"declares {info.file_size} bytes, more than the {limit} its role allows", size=True)
    try:
        with zf.open(info) as fh:
            data = fh.read(limit + 1)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise ModelLoadError(f"{path} is a damaged archive: member {info.filename} cannot be read ({exc}).", "Save the model again.") from exc
    if len(data) != info.file_size:
        raise refuse(path, info.filename, "inflates to a size other than the one its header declares")
    return data


def _model_names(path: Path, tails: dict[str, zipfile.ZipInfo]) -> list[str]:
    models = []
    for tail, info in tails.items():
        if tail.startswith("models/"):
            name = tail[len("models/"):-len(".json")] if tail.endswith(".json") else ""
            if not _MODEL_NAME.fullmatch(name):
                raise refusal(path, info.filename, "is in models/ but is not named <identifier>.json")
            models.append(name)
    if not models:
        raise refusal(path, "models/<name>.json", "is missing: no program in the archive (or a pre-2.8 layout)")
    return sorted(models)


def _expected_members(path: Path, zf: zipfile.ZipFile, root: str, tails: dict, models: list[str], limits: ArchiveLimits) -> dict[str, int]:
    """Each member the format allows for these models -> the most bytes it may hold."""
    expected = {tail: 64 for tail in (*_FORMAT_FILES, *_FREE_FORMAT_FILES) if tail in tails}
    for tail in ("archive_format", "archive_version"):
        if tail not in tails:
            raise refusal(path, f"{root}/{tail}", "is missing (the format requires it)")
    for model in models:
        expected[f"models/{model}.json"] = limits.max_json_bytes
        expected[f"data/sample_inputs/{model}.pt"] = limits.max_json_bytes  # narrowed in _check_model
        for folder, kind in (("data/weights/", "weights"), ("data/constants/", "constants")):
            config = f"{folder}{model}_{kind}_config.json"
            if config not in tails:
                continue
            expected[config] = 16 << 20
            entries = _payload_config(path, root, config, read_member(path, zf, tails[config], 16 << 20))
            for meta in entries.values():
                tail = folder + meta["path_name"]
                if tail in tails:
                    expected[tail] = tails[tail].file_size  # the exact size is checked against its meta
    return expected


def _payload_config(path: Path, root: str, tail: str, data: bytes) -> dict[str, dict]:
    member = f"{root}/{tail}"
    config = _json(path, member, data)
    entries = config.get("config") if isinstance(config, dict) and set(config) == {"config"} else None
    if not isinstance(entries, dict):
        raise refusal(path, member, "is not a payload config ({\"config\": {...}})")
    folder = tail.rsplit("/", 1)[0] + "/"
    for fqn, meta in entries.items():
        if not DOTTED_NAME.fullmatch(fqn):
            raise refusal(path, member, f"names {_shown(fqn)!r}, which is not a dotted Python identifier")
        if not isinstance(meta, dict) or set(meta) - {"path_name", "is_param", "use_pickle", "tensor_meta"}:
            raise refusal(path, member, f"has an entry for {fqn} with fields the format does not define")
        if not isinstance(meta.get("path_name"), str) or not _PAYLOAD_NAME[folder].fullmatch(meta["path_name"]):
            raise refusal(path, member, f"points {fqn} at {_shown(str(meta.get('path_name')))!r}, not a tensor file (objects are refused)")
        if not isinstance(meta.get("tensor_meta"), dict):
            raise refusal(path, member, f"has no tensor metadata for {fqn}")
    return entries


def _json(path: Path, member: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise refusal(path, member, f"is not valid JSON ({str(exc)[:80]})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_model(path: Path, root: str, model: str, members: dict[str, bytes], limits: ArchiveLimits) -> None:
    from .pt2_program import check_program, user_input_bytes

    program_tail = f"models/{model}.json"
    program = _json(path, f"{root}/{program_tail}", members[program_tail])
    check_program(path, f"{root}/{program_tail}", program)
    sample = f"data/sample_inputs/{model}.pt"
    if sample in members:
        allowed = user_input_bytes(program) * 2 + limits.sample_input_slack
        if len(members[sample]) > allowed:
            raise refusal(path, f"{root}/{sample}", f"holds {len(members[sample])} bytes, more than the model's inputs need ({allowed})", size=True)
        _weights_only(path, f"{root}/{sample}", members[sample], "sample inputs")
    for folder, kind in (("data/weights/", "weights"), ("data/constants/", "constants")):
        config = f"{folder}{model}_{kind}_config.json"
        if config in members:
            _check_payloads(path, root, folder, config, members, limits)


def _check_payloads(path: Path, root: str, folder: str, config: str, members: dict[str, bytes], limits: ArchiveLimits) -> None:
    """Raw records exactly as large as the tensors stored in them (torch stores views of one
    storage once, as the largest); pickled ones near their tensor's size and weights_only-loadable."""
    from .pt2_program import payload_bytes

    entries = _payload_config(path, root, config, members[config])
    needs = {fqn: payload_bytes(path, f"{root}/{config}", fqn, meta["tensor_meta"]) for fqn, meta in entries.items()}
    largest: dict[str, int] = {}
    for fqn, meta in entries.items():
        largest[meta["path_name"]] = max(largest.get(meta["path_name"], 0), needs[fqn])
    for fqn, meta in entries.items():
        tail = folder + meta["path_name"]
        if tail not in members:
            continue  # torch refuses the missing record before reading anything
        data, need = members[tail], needs[fqn]
        if meta.get("use_pickle"):
            if len(data) > need + limits.sample_input_slack:
                raise refusal(path, f"{root}/{tail}", f"holds {len(data)} bytes for a {need}-byte tensor")
            _weights_only(path, f"{root}/{tail}", data, f"weight or constant {fqn}")
        elif len(data) != 0 and not need <= len(data) <= largest[meta["path_name"]]:
            raise refusal(path, f"{root}/{tail}", f"holds {len(data)} bytes where tensor {fqn} needs {need}")


def _weights_only(path: Path, member: str, data: bytes, label: str) -> None:
    """torch's weights_only unpickler builds only tensors and plain containers: a payload that needs
    more (a reduce to os.system, a class) fails here instead of running."""
    import torch

    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception:  # a probe: any failure means "not plain tensors", which is refused
        raise refusal(path, member, f"({label}) is a pickle that holds more than tensors") from None
