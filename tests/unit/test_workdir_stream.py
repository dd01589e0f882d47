"""The workdir stream a sandbox fork copies with (`agentrl/sandbox/workdir_stream.py`), on local directories:
a round trip keeps every entry's bytes, mode, mtime and kind; a target that held files ends equal; hostile or
broken streams are refused without writing outside the target."""

from __future__ import annotations

import io
import os
import socket
import stat
from pathlib import Path

import pytest
from workdir_listing import listing

from agentrl.sandbox.channel import SERVER_SOURCE, server_source
from agentrl.sandbox.workdir_stream import (
    DIRECTORY,
    FILE,
    HARDLINK,
    SYMLINK,
    check_path,
    entry_kind,
    pack_entry,
    read_tree,
    write_tree,
)


def stream_of(root: Path) -> tuple[bytes, dict[str, int]]:
    out = io.BytesIO()
    counts = write_tree(os.fsencode(root), out)
    return out.getvalue(), counts


def restored(data: bytes, target: Path) -> dict[str, int]:
    return read_tree(os.fsencode(target), io.BytesIO(data))


def a_workdir(root: Path) -> Path:
    """Edits, modes, a nested empty dir, symlinks (relative, absolute, dangling), a hard link, a FIFO, a
    name that is not UTF-8, a read-only directory and an empty file."""
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("print('a')\n")
    (root / "pkg" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "pkg" / "run.sh").chmod(0o755)
    (root / "secret").write_bytes(os.urandom(3000))
    (root / "secret").chmod(0o600)
    (root / "empty").touch()
    (root / "new" / "nested" / "deeper").mkdir(parents=True)
    (root / "link").symlink_to("pkg/a.py")
    (root / "absolute").symlink_to("/etc/passwd")
    (root / "dangling").symlink_to("nowhere/at/all")
    os.link(root / "pkg" / "a.py", root / "hard")
    os.mkfifo(root / "fifo", 0o640)
    (root / os.fsdecode(b"caf\xe9")).write_bytes(b"latin-1 name")
    (root / "frozen").mkdir()
    (root / "frozen" / "inside").write_text("kept\n")
    (root / "frozen").chmod(0o555)
    os.utime(root / "pkg" / "a.py", ns=(1, 123_456_789_012_345_678))
    root.chmod(0o750)
    return root


def test_a_round_trip_keeps_every_entry(tmp_path: Path) -> None:
    parent = a_workdir(tmp_path / "parent")
    data, counts = stream_of(parent)
    child = tmp_path / "child"
    child.mkdir()
    assert restored(data, child) == {"entries": counts["entries"]}
    assert listing(str(child)) == listing(str(parent))
    assert (child / "pkg" / "a.py").stat().st_ino == (child / "hard").stat().st_ino
    assert counts["skipped"] == 0 and counts["entries"] == len(listing(str(parent)))


def test_a_target_that_held_files_ends_equal_to_the_parent(tmp_path: Path) -> None:
    parent = a_workdir(tmp_path / "parent")
    child = tmp_path / "child"
    (child / "stale" / "locked").mkdir(parents=True)
    (child / "stale" / "locked" / "old.txt").write_text("from the image\n")
    (child / "stale" / "locked").chmod(0o500)
    (child / "pkg").mkdir()
    (child / "pkg" / "a.py").write_text("the target's own version\n")
    (child / "link").symlink_to("/tmp")
    restored(stream_of(parent)[0], child)
    assert listing(str(child)) == listing(str(parent))


def test_an_empty_workdir_round_trips(tmp_path: Path) -> None:
    (tmp_path / "parent").mkdir()
    (tmp_path / "child").mkdir()
    restored(stream_of(tmp_path / "parent")[0], tmp_path / "child")
    assert listing(str(tmp_path / "child")) == listing(str(tmp_path / "parent"))


def test_sockets_are_skipped_and_counted(tmp_path: Path) -> None:
    (tmp_path / "parent").mkdir()
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "parent" / "sock"))
        (tmp_path / "parent" / "file").write_text("x")
        data, counts = stream_of(tmp_path / "parent")
    finally:
        server.close()
    assert counts == {"entries": 2, "bytes": 1, "skipped": 1}
    (tmp_path / "child").mkdir()
    restored(data, tmp_path / "child")
    assert sorted(os.listdir(tmp_path / "child")) == ["file"]


def root_record() -> bytes:
    return pack_entry(DIRECTORY, 0o755, 0, b"", 0)


@pytest.mark.parametrize(
    "records",
    [
        pack_entry(FILE, 0o644, 0, b"/tmp/evil", 1) + b"x",  # absolute
        pack_entry(FILE, 0o644, 0, b"../evil", 1) + b"x",  # up and out
        pack_entry(FILE, 0o644, 0, b"a/./b", 1) + b"x",
        pack_entry(FILE, 0o644, 0, b"missing/evil", 1) + b"x",  # a parent the stream never made
        # through a symlink the stream made: "out" -> the outside, then "out/evil"
        pack_entry(SYMLINK, 0o777, 0, b"out", 0) + pack_entry(FILE, 0o644, 0, b"out/evil", 1) + b"x",
        pack_entry(HARDLINK, 0, 0, b"stolen", 9) + b"/etc/hosts",  # a link to a file it did not write
        pack_entry(FILE, 0o644, 0, b"twice", 0) + pack_entry(FILE, 0o644, 0, b"twice", 0),
        pack_entry(FILE, 0o644, 0, b"short", 10) + b"abc",  # the stream ends inside the payload
        pack_entry(b"?", 0o644, 0, b"odd", 0),
    ],
)
def test_hostile_or_broken_streams_are_refused_and_write_nothing_outside(
    tmp_path: Path, records: bytes
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    symlink_target = pack_entry(SYMLINK, 0o777, 0, b"out", len(str(outside))) + os.fsencode(outside)
    records = records.replace(pack_entry(SYMLINK, 0o777, 0, b"out", 0), symlink_target)
    with pytest.raises((ValueError, OSError)):
        restored(root_record() + records, target)
    assert list(outside.iterdir()) == [] and not (tmp_path / "evil").exists()


def test_a_stream_must_start_with_its_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="root"):
        restored(pack_entry(FILE, 0o644, 0, b"a", 0), tmp_path)
    with pytest.raises(ValueError, match="root"):
        restored(b"", tmp_path)


def test_paths_must_be_fresh_relative_names_inside_made_directories() -> None:
    made = {b"", b"pkg"}
    check_path(b"pkg/a.py", made)
    check_path(b"top", made)
    for bad in (b"", b"/abs", b"pkg/../x", b"./x", b"pkg//x", b"pkg/", b"other/x", b"pkg/a\0b"):
        with pytest.raises(ValueError):
            check_path(bad, made)


def test_entry_kinds() -> None:
    assert entry_kind(stat.S_IFDIR | 0o755) == DIRECTORY
    assert entry_kind(stat.S_IFREG | 0o644) == FILE
    assert entry_kind(stat.S_IFLNK | 0o777) == SYMLINK
    assert entry_kind(stat.S_IFSOCK | 0o755) is None
    assert entry_kind(stat.S_IFCHR | 0o600) is None


def test_the_server_source_keeps_one_future_import_first() -> None:
    joined = server_source(
        "from __future__ import annotations\nA = 1\n", "from __future__ import annotations\nB = A\n"
    )
    namespace: dict[str, object] = {}
    exec(compile(joined, "server", "exec"), namespace)  # noqa: S102 - our own two sources
    assert namespace["B"] == 1 and joined.count("from __future__") == 1
    compile(SERVER_SOURCE, "channel_server", "exec")
    assert SERVER_SOURCE.count("from __future__") == 1 and "def write_tree" in SERVER_SOURCE
