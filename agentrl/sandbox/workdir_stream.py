"""The stream a sandbox fork copies a workdir with: every entry's kind, mode, mtime and bytes, in one pass.

What this is: two functions the exec channel's server runs inside the containers (stdlib only; the host sends
this module's source ahead of `channel_server.py`'s, see `agentrl/sandbox/channel.py`), plus the record
format they share. `write_tree(root, out)` walks `root` (the root first, then depth first by name) and
writes one record per entry to `out`: a header (`ENTRY`: kind, permission bits, mtime in ns, path length,
payload length), the path relative to `root` (bytes, `/`-separated; empty for the root), then the payload:
a regular file's bytes, a symlink's target, or for a further hard link to a file already written, that
file's path. Directories, FIFOs and the root carry no payload. Sockets (and devices, which a `nodev` tmpfs
cannot hold) are skipped and counted. An entry its owner cannot read (mode 000, a directory without r or x)
is read after adding the missing owner bits for the moment (the workdir belongs to the sandbox user).

`read_tree(root, source)` rebuilds that tree in `root`: it empties `root` first when it is not empty, so the
result equals the parent's workdir whatever the target held, then creates each entry exactly once
(`O_EXCL`, `O_NOFOLLOW`, `mkdir`), inside a directory it created itself, so a hostile stream can write nothing
outside `root` (no absolute paths, no `..`, no path through a symlink). Contents, permission bits, mtimes,
symlinks, hard links, FIFOs, empty directories and the root's own mode are kept; owners are not (every file
belongs to the sandbox user on both sides). Directory modes and mtimes are set last, deepest first.

Why not tar: Python's `tarfile` (user and group name lookups, 512-byte headers, per-member bookkeeping) took
20.5 ms to write and 18.4 ms to extract the 85 entries of a swebench-local workspace, 39 of a 56 ms fork;
this takes 1.4 and 2.2 ms (p50s of `bench/sandbox_fork.py`, bench/results/sandbox_fork.json, both measured
in one run on a loaded machine). GNU tar would cost a process on each side, and not every image has it.

What this is not: an archive format for storage (no owners, no checksums, no versioning: both ends always
run the same source) or a delta: the target's workdir is always rebuilt whole.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import struct
from collections.abc import Iterator
from typing import Any

ENTRY = struct.Struct(">cIqIQ")  # kind, permission bits, mtime (ns), path length, payload length
DIRECTORY, FILE, SYMLINK, HARDLINK, FIFO = b"d", b"f", b"l", b"h", b"p"
READ_CHUNK = 1 << 20
OWNER_READ = stat.S_IRUSR
OWNER_LIST = stat.S_IRUSR | stat.S_IXUSR


def pack_entry(kind: bytes, mode: int, mtime_ns: int, path: bytes, size: int) -> bytes:
    """One record's header and path (its payload of `size` bytes follows); pure."""
    return ENTRY.pack(kind, stat.S_IMODE(mode), mtime_ns, len(path), size) + path


def entry_kind(mode: int) -> bytes | None:
    """The record kind of an `lstat` mode, None for what a fork does not copy (sockets, devices); pure."""
    if stat.S_ISDIR(mode):
        return DIRECTORY
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISLNK(mode):
        return SYMLINK
    if stat.S_ISFIFO(mode):
        return FIFO
    return None


def check_path(path: bytes, directories: set[bytes]) -> None:
    """ValueError unless `path` is a fresh relative name inside one of `directories` (the ones this restore
    created; b"" is the root): no absolute path, no empty, "." or ".." component; pure."""
    parts = path.split(b"/")
    if not path or path.startswith(b"/") or any(part in (b"", b".", b"..") for part in parts):
        raise ValueError(f"refusing the stream's path {path!r}")
    if b"\0" in path or path.rpartition(b"/")[0] not in directories:
        raise ValueError(f"refusing {path!r}: its parent is not a directory of this stream")


def write_tree(root: bytes, out: Any) -> dict[str, int]:
    """Write every entry under `root` to `out` (anything with `write(bytes)`); returns the counts of
    `entries` written, payload `bytes` and `skipped` entries."""
    counts = {"entries": 1, "bytes": 0, "skipped": 0}
    status = os.lstat(root)
    out.write(pack_entry(DIRECTORY, status.st_mode, status.st_mtime_ns, b"", 0))
    with owner_access(root, status.st_mode, OWNER_LIST):
        _write_directory(root, b"", out, counts, {})
    return counts


def _write_directory(
    root: bytes, relative: bytes, out: Any, counts: dict[str, int], links: dict[tuple[int, int], bytes]
) -> None:
    """Write the entries of `root`/`relative`, depth first by name; `links` maps (device, inode) to the
    path of every file with more than one link written so far."""
    with os.scandir(os.path.join(root, relative) if relative else root) as found:
        entries = sorted(found, key=lambda entry: entry.name)
    for entry in entries:
        path = relative + b"/" + entry.name if relative else entry.name
        status = entry.stat(follow_symlinks=False)
        kind = entry_kind(status.st_mode)
        if kind is None:
            counts["skipped"] += 1
            continue
        counts["entries"] += 1
        if kind == FILE and status.st_nlink > 1:
            first = links.setdefault((status.st_dev, status.st_ino), path)
            if first != path:
                out.write(pack_entry(HARDLINK, 0, 0, path, len(first)) + first)
                continue
        header = functools.partial(pack_entry, kind, status.st_mode, status.st_mtime_ns, path)
        if kind == DIRECTORY:
            out.write(header(0))
            with owner_access(entry.path, status.st_mode, OWNER_LIST):
                _write_directory(root, path, out, counts, links)
        elif kind == SYMLINK:
            target = os.readlink(entry.path)
            out.write(header(len(target)) + target)
        elif kind == FIFO:
            out.write(header(0))
        else:
            out.write(header(status.st_size))
            counts["bytes"] += _copy_file(entry.path, status, out)


def _copy_file(path: bytes, status: os.stat_result, out: Any) -> int:
    """Write the file's `st_size` bytes to `out`; OSError if it shrank meanwhile (its header is out)."""
    left = status.st_size
    if left == 0:
        return 0
    with owner_access(path, status.st_mode, OWNER_READ):
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while left:
            chunk = os.read(descriptor, min(left, READ_CHUNK))
            if not chunk:
                raise OSError(f"{os.fsdecode(path)} shrank while the workdir was copied")
            out.write(chunk)
            left -= len(chunk)
    finally:
        os.close(descriptor)
    return status.st_size


@contextlib.contextmanager
def owner_access(path: bytes, mode: int, bits: int) -> Iterator[None]:
    """While open, `path` has the owner `bits` its `mode` lacks; its mode is put back afterwards."""
    missing = bits & ~mode
    if not missing:
        yield
        return
    os.chmod(path, stat.S_IMODE(mode) | missing)
    try:
        yield
    finally:
        os.chmod(path, stat.S_IMODE(mode))


def read_tree(root: bytes, source: Any) -> dict[str, int]:
    """Rebuild in `root` the tree `source` (anything with `read(size)`, b"" at the end) holds; returns the
    count of `entries`. ValueError for a malformed or hostile stream."""
    if os.listdir(root):
        empty_directory(root)
    header = _read_header(source)
    if header is None or header[0] != DIRECTORY or header[3]:
        raise ValueError("the stream does not start with its root directory")
    directories: list[tuple[bytes, int, int]] = [(root, header[1], header[2])]
    made: set[bytes] = {b""}
    files: set[bytes] = set()
    entries = 1
    while (header := _read_header(source)) is not None:
        kind, mode, mtime_ns, path, size = header
        check_path(path, made)
        target = os.path.join(root, path)
        entries += 1
        if kind == DIRECTORY:
            os.mkdir(target, 0o700)
            made.add(path)
            directories.append((target, mode, mtime_ns))
        elif kind == FILE:
            _restore_file(target, mode, mtime_ns, size, source)
            files.add(path)
        else:
            _restore_other(root, target, kind, mode, mtime_ns, _read_exact(source, size), files)
    for directory, mode, mtime_ns in reversed(directories):  # deepest first: a parent's mode may forbid it
        os.chmod(directory, mode)
        os.utime(directory, ns=(mtime_ns, mtime_ns))
    return {"entries": entries}


def _restore_file(target: bytes, mode: int, mtime_ns: int, size: int, source: Any) -> None:
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        left = size
        while left:
            chunk = memoryview(_read_exact(source, min(left, READ_CHUNK)))
            left -= len(chunk)
            while chunk:
                chunk = chunk[os.write(descriptor, chunk) :]
        os.fchmod(descriptor, mode)
        os.utime(descriptor, ns=(mtime_ns, mtime_ns))
    finally:
        os.close(descriptor)


def _restore_other(
    root: bytes, target: bytes, kind: bytes, mode: int, mtime_ns: int, payload: bytes, files: set[bytes]
) -> None:
    """A symlink, a FIFO, or a further hard link to a file this stream already wrote."""
    if kind == SYMLINK:
        os.symlink(payload, target)
        os.utime(target, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
    elif kind == FIFO:
        os.mkfifo(target, 0o600)
        os.chmod(target, mode)
        os.utime(target, ns=(mtime_ns, mtime_ns))
    elif kind == HARDLINK and payload in files:
        os.link(os.path.join(root, payload), target, follow_symlinks=False)
    else:
        raise ValueError(f"refusing the stream's entry {target!r} (kind {kind!r})")


def _read_header(source: Any) -> tuple[bytes, int, int, bytes, int] | None:
    """The next record's (kind, mode, mtime_ns, path, payload size), or None at the end of the stream."""
    head = source.read(ENTRY.size)
    if not head:
        return None
    if len(head) < ENTRY.size:
        raise ValueError("the stream ends inside a record")
    kind, mode, mtime_ns, path_size, size = ENTRY.unpack(head)
    return kind, mode, mtime_ns, _read_exact(source, path_size), size


def _read_exact(source: Any, size: int) -> bytes:
    data = source.read(size) if size else b""
    if len(data) != size:
        raise ValueError("the stream ends inside a record")
    return bytes(data)


def empty_directory(directory: bytes) -> None:
    """Remove everything inside `directory` (not the directory itself), giving read-only or unlistable
    directories back to their owner on the way down."""
    os.chmod(directory, 0o700)
    with os.scandir(directory) as found:
        entries = list(found)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            empty_directory(entry.path)
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)
