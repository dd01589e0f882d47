"""What two workdirs must agree on after a fork: a listing of every entry under a root, stdlib only.

`listing(root)` maps each path (relative, "" for the root) to its type and permission bits, mtime in ns,
size, sha256 of a file's bytes, a symlink's target and, for a file with several links, the first path (by
name) of its inode. Entries its owner cannot read are read after adding the owner bits for the moment, so
a mode-000 file is listed with its mode and its contents. Run inside a container as `python3 -c <this
file's source> ROOT` (it prints the listing as JSON; `in_sandbox` does that), or imported on the host.

What this is not: part of agentrl; a test helper.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any


def listing(root: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    inodes: dict[tuple[int, int], str] = {}
    _list(root, "", found, inodes)
    return found


def _list(root: str, relative: str, found: dict[str, list[Any]], inodes: dict[tuple[int, int], str]) -> None:
    path = os.path.join(root, relative) if relative else root
    status = os.lstat(path)
    mode = status.st_mode
    entry: list[Any] = [oct(mode), status.st_mtime_ns, None, None, None]
    if stat.S_ISREG(mode):
        entry[2] = status.st_size
        entry[3] = _with_owner_bits(path, mode, stat.S_IRUSR, lambda: _sha256(path))
        first = inodes.setdefault((status.st_dev, status.st_ino), relative)
        entry[4] = first if status.st_nlink > 1 else None
    elif stat.S_ISLNK(mode):
        entry[4] = os.readlink(path)
    found[relative] = entry
    if stat.S_ISDIR(mode):
        names = _with_owner_bits(path, mode, stat.S_IRUSR | stat.S_IXUSR, lambda: sorted(os.listdir(path)))
        owner_bits = stat.S_IRUSR | stat.S_IXUSR
        for name in names:
            child = f"{relative}/{name}" if relative else name
            _with_owner_bits(path, mode, owner_bits, lambda child=child: _list(root, child, found, inodes))


def _with_owner_bits(path: str, mode: int, bits: int, action: Any) -> Any:
    missing = bits & ~mode
    if missing:
        os.chmod(path, stat.S_IMODE(mode) | missing)
    try:
        return action()
    finally:
        if missing:
            os.chmod(path, stat.S_IMODE(mode))


def in_sandbox(sandbox: Any) -> dict[str, list[Any]]:
    """This module run inside `sandbox` on its workdir (through a file: a listing outgrows output caps)."""
    script = Path(__file__).read_text(encoding="utf-8")
    command = 'python3 -I -S -c "$0" "$1" > /tmp/listing.json'
    result = sandbox.exec(["sh", "-c", command, script, sandbox.config.workdir])
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(sandbox.read_file("/tmp/listing.json")))


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


if __name__ == "__main__":
    print(json.dumps(listing(sys.argv[1])))
