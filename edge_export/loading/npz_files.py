"""What an untrusted ``.npz`` (calibration data, test vectors) may hold, checked from its headers
before numpy allocates anything: only ``<key>.npy`` members (numpy reads any other member without
the checks below), each with a readable header, no Python objects, and a declared size that fits in
what the member stores; all together within the memory available."""

from __future__ import annotations

import zipfile

import numpy as np

__all__ = ["UnsafeNpz", "check_npz_members"]


class UnsafeNpz(ValueError):
    """The problem, worded to follow "<file> is not usable: "."""


def _header(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> tuple[tuple, np.dtype]:
    with archive.open(member) as stream:
        try:
            version = np.lib.format.read_magic(stream)
            reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if reader is None:
                raise ValueError(f"npy format version {version}")
            shape, _, dtype = reader(stream)
        except (OSError, ValueError, EOFError) as exc:
            raise UnsafeNpz(f"its member {member.filename!r} has no readable .npy header ({exc})") from None
    return shape, dtype


def check_npz_members(archive: zipfile.ZipFile, what: str, max_members: int = 10_000) -> int:
    """Raise UnsafeNpz naming the first member outside the rules; the bytes all arrays declare."""
    from ..errors import UsageError
    from ..processes.memory import ensure_memory_for

    members = archive.infolist()
    if len(members) > max_members:
        raise UnsafeNpz(f"it holds {len(members)} members")
    names = [m.filename for m in members]
    if len(set(names)) != len(names):
        raise UnsafeNpz("a member name appears twice")
    total = 0
    for member in members:
        if not member.filename.endswith(".npy"):
            raise UnsafeNpz(f"its member {member.filename!r} is not an .npy array")
        shape, dtype = _header(archive, member)
        if dtype.hasobject:
            raise UnsafeNpz(f"its member {member.filename!r} holds Python objects, which are never loaded")
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if declared > member.file_size:
            raise UnsafeNpz(f"its member {member.filename!r} declares {declared} bytes but holds {member.file_size}")
        total += declared
    try:
        ensure_memory_for(total, f"Reading {what}", "Check that this is the file you meant.")
    except UsageError as exc:
        raise UnsafeNpz(str(exc).rstrip(".")) from None
    return total
