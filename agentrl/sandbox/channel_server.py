"""The in-container end of the exec channel: a small long-lived server that runs commands on request.

What this is: a standalone, stdlib-only Python 3 program. The host starts it once per container with
`docker exec -i <container> python3 -I -S -c <source> [SOCKET TOKEN]`, the source being `workdir_stream.py`'s
followed by this file's (`agentrl/sandbox/channel.py`, `server_source`), so any image with python3 works and
nothing has to be baked into the image. It always says hello on stdout.
Given SOCKET and TOKEN, it first connects to the host's unix socket at SOCKET (a bind mount of a host
directory), sends TOKEN and a newline, and from then on speaks over that socket instead of stdin/stdout (one
kernel hop instead of the engine's attach relay); the hello says which transport it uses and why a connect
failed. It reads requests and writes replies, each frame a 4-byte big-endian length followed by that many
bytes of UTF-8 JSON; binary payloads are base64, except a workdir's stream (`workdir_stream.py`, what a fork
copies): `snapshot` replies with raw chunk frames (4-byte length + bytes, ended by an empty frame) before its
JSON status, and `restore` reads such frames right after its request, so a workdir is copied without ever
being held whole in the container's memory. One request at a time; operations: `exec`, `write`, `read`,
`snapshot`, `restore`, `ping`.

`exec` runs argv in a new session (its own process group), feeds stdin, keeps at most `limit` head bytes and
`limit` tail bytes of each output stream while it arrives, and on timeout SIGKILLs every process the command
started — its group, its session, its descendants, and daemons that left with `setsid` and a double fork
(the server is a child subreaper, so they are re-parented to it; see `command_processes`) — then answers;
the server stays usable. Background processes of commands that finished in time are left alone. OOM is read
from the memory cgroup's `oom_kill` counter when the kernel exposes it (cgroup v1 `memory.oom_control`, or v2
`memory.events`), else inferred from SIGKILL without a timeout.

What this is not: a security boundary. It runs as the sandbox user, with the container's limits; a command
that kills the server (same uid) ends the channel, which the host reports as `SandboxLost`.
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import shutil
import signal
import time
from typing import Any

if "write_tree" not in globals():  # imported (tests); a container runs this after workdir_stream.py's source
    from agentrl.sandbox.workdir_stream import read_tree, write_tree

DRAIN_AFTER_KILL_S = 0.2  # after a timeout kill, read what the pipes still hold for this long
READ_CHUNK = 65536
CHUNK_SIZE = 1 << 20  # raw chunk frames of workdir streams
OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
# what subprocess's restore_signals resets: Python ignores these, a command must start with the defaults
HOME = os.open(".", os.O_RDONLY | os.O_DIRECTORY)  # close-on-exec; `spawn` returns here after a cwd
RESET_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


IN_FD, OUT_FD = 0, 1  # the transport: stdin/stdout (docker attach), or a connected unix socket (see serve)


def read_exact(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def send(message: dict[str, Any]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    data = len(body).to_bytes(4, "big") + body
    while data:
        data = data[os.write(OUT_FD, data) :]


def send_raw(data: bytes) -> None:
    """One raw chunk frame (4-byte length + bytes, no JSON); the empty frame ends a stream."""
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(OUT_FD, view) :]


def oom_kills() -> int | None:
    for path in OOM_FILES:
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return None


class Capture:
    """A bounded head and tail of one stream, and its total size."""

    def __init__(self, limit: int) -> None:
        self.limit, self.total, self.head, self.tail = limit, 0, bytearray(), bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.limit)]

    def wire(self) -> list[Any]:
        return [base64.b64encode(self.head).decode(), base64.b64encode(self.tail).decode(), self.total]


def process_table() -> dict[int, tuple[int, int, int, bool]]:
    """pid -> (ppid, session id, start time in clock ticks since boot, is a zombie) of every process here."""
    table: dict[int, tuple[int, int, int, bool]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            # fields after the name: state ppid pgrp session ... (index 19 is starttime)
            table[int(name)] = (int(fields[1]), int(fields[3]), int(fields[19]), fields[0] == "Z")
        except (OSError, IndexError, ValueError):
            continue
    return table


def command_processes(table: dict[int, tuple[int, int, int, bool]], root: int, server: int) -> set[int]:
    """Every process the command `root` started, by three rules: (1) in its session, (2) a descendant of it,
    (3) adopted by this server (a child subreaper, so double-forked daemons land here) and started after
    `root` (a later clock tick, or the same tick and a higher pid) — which catches `setsid` daemons, since
    commands run one at a time. Zombies (already dead)
    are left out. Pure."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    adopted = []
    if root in table:  # start times (10 ms ticks), then pid order within a tick, say what came after root
        after = (table[root][2], root)
        adopted = [pid for pid in children.get(server, []) if pid != root and (table[pid][2], pid) > after]
    found: set[int] = set()
    stack = [root, *adopted, *(pid for pid, (_, sid, _, _) in table.items() if sid == root)]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return {pid for pid in found if pid != server and pid in table and not table[pid][3]}


def kill_session(sid: int) -> None:
    """SIGKILL everything command `sid` started: its process group, session, descendants and the daemons it
    left with this server (see `command_processes`); a few passes, so processes forked meanwhile die too."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(3):
        targets = command_processes(process_table(), sid, os.getpid())
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue


def become_subreaper() -> bool:
    """Make orphans of commands this server's children (PR_SET_CHILD_SUBREAPER), so a timeout can find the
    daemons a command left; False where prctl is unavailable (then only rules 1-2 of `command_processes`)."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError, ImportError):
        return False


def reap_adopted() -> None:
    """Collect exited adopted processes (as their subreaper, zombies would otherwise pile up as pids)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Child:
    """A spawned command: its pid and the host ends of its pipes (stdin is None when it reads /dev/null)."""

    def __init__(self, pid: int, stdin: int | None, stdout: int, stderr: int) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def spawn(argv: list[str], env: dict[str, str], cwd: str | None, with_stdin: bool) -> Child:
    """Start argv in a new session with piped stdout/stderr (and stdin) through `os.posix_spawn`.

    glibc's posix_spawn is a vfork-style clone + exec, several times cheaper than subprocess.Popen's
    fork_exec path with its error pipe; an exec failure still raises OSError here. posix_spawn has no cwd
    argument in Python, and the server is single-threaded, so it changes directory around the spawn.
    The child gets a fresh environment mapping, the default SIGPIPE/SIGXFSZ dispositions and its own session.
    Pipe ends are close-on-exec (PEP 446), so the child keeps only the three it gets by dup2."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    in_read, in_write = os.pipe() if with_stdin else (-1, None)
    actions: list[tuple[Any, ...]] = [
        (os.POSIX_SPAWN_DUP2, out_write, 1),
        (os.POSIX_SPAWN_DUP2, err_write, 2),
    ]
    if with_stdin:
        actions.insert(0, (os.POSIX_SPAWN_DUP2, in_read, 0))
    else:
        actions.insert(0, (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    try:
        if cwd:
            os.chdir(cwd)
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=RESET_SIGNALS)
    except BaseException:
        for fd in (out_read, err_read, in_write):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        if cwd:
            os.fchdir(HOME)  # the server's own directory, even if a command has since removed it
        for fd in (out_write, err_write, in_read):
            if fd >= 0:
                os.close(fd)
    return Child(pid, in_write, out_read, err_read)


def pump(child: Child, stdin: bytes, deadline: float, limit: int) -> tuple[Capture, Capture, bool]:
    """Feed stdin and read stdout/stderr until the command has exited and both pipes closed, or until
    `deadline` (then kill its session and drain briefly); returns (stdout, stderr, timed_out). Once the
    command exits, pipes still held open by a background child get `DRAIN_AFTER_KILL_S` more."""
    captures = {child.stdout: Capture(limit), child.stderr: Capture(limit)}
    selector = selectors.DefaultSelector()
    for fd in captures:
        selector.register(fd, selectors.EVENT_READ)
    if child.stdin is not None:
        os.set_blocking(child.stdin, False)
        selector.register(child.stdin, selectors.EVENT_WRITE)
    pidfd = os.pidfd_open(child.pid)  # readable once the command exits: no polling, no sleeps
    selector.register(pidfd, selectors.EVENT_READ)
    exited = timed_out = False
    while not exited or any(fd in selector.get_map() for fd in captures):
        left = deadline - time.monotonic()
        if left <= 0 and (exited or timed_out):
            break
        if left <= 0:
            timed_out = True
            kill_session(child.pid)
            deadline = time.monotonic() + DRAIN_AFTER_KILL_S
            continue
        for key, _ in selector.select(left):
            if key.fd == pidfd:
                exited = True
                selector.unregister(pidfd)
                deadline = min(deadline, time.monotonic() + DRAIN_AFTER_KILL_S)
            elif key.fd == child.stdin:
                stdin = _write_some(child, selector, stdin)
            else:
                chunk = os.read(key.fd, READ_CHUNK)
                if chunk:
                    captures[key.fd].feed(chunk)
                else:
                    selector.unregister(key.fd)
    selector.close()
    os.close(pidfd)
    return captures[child.stdout], captures[child.stderr], timed_out


def _write_some(child: Child, selector: selectors.BaseSelector, data: bytes) -> bytes:
    assert child.stdin is not None
    try:
        data = data[os.write(child.stdin, data[:READ_CHUNK]) :]
    except BrokenPipeError:
        data = b""
    if not data:
        selector.unregister(child.stdin)
        os.close(child.stdin)
        child.stdin = None
    return data


def resolve(program: str, path: str | None) -> str:
    """The executable posix_spawn needs: `program` itself when it has a slash, else the first match on
    PATH (resolving here is much cheaper than letting the child try each directory), else `program`, which
    then fails with ENOENT like a shell would."""
    if "/" in program:
        return program
    return shutil.which(program, path=path) or program


def failed_spawn(error: OSError, program: str, started: float, limit: int) -> dict[str, Any]:
    """The reply for a command that could not start: 127 (not found) or 126 (not executable), like sh."""
    failed = Capture(limit)
    failed.feed(f"{error.filename or program}: {error.strerror}\n".encode())
    return {
        "ok": True,
        "exit": 127 if isinstance(error, FileNotFoundError) else 126,
        "timed_out": False,
        "oom": False,
        "duration": time.monotonic() - started,
        "out": Capture(0).wire(),
        "err": failed.wire(),
    }


def run(request: dict[str, Any]) -> dict[str, Any]:
    stdin = base64.b64decode(request["stdin"]) if request.get("stdin") is not None else None
    env = {**os.environ, **(request.get("env") or {})}
    argv = list(request["argv"])
    argv[0] = resolve(argv[0], env.get("PATH"))
    oom_before = oom_kills()
    started = time.monotonic()
    try:
        child = spawn(argv, env, request.get("cwd"), stdin is not None)
    except OSError as error:
        return failed_spawn(error, argv[0], started, request["limit"])
    try:
        deadline = started + request["timeout"]
        stdout, stderr, timed_out = pump(child, stdin or b"", deadline, request["limit"])
        if timed_out:
            kill_session(child.pid)  # stragglers that appeared while draining
        returncode = os.waitstatus_to_exitcode(os.waitpid(child.pid, 0)[1])
    finally:
        child.close()
    reap_adopted()
    killed = returncode == -signal.SIGKILL
    oom_after = oom_kills() if killed else None  # only a SIGKILL can be the OOM killer's
    oom = (oom_after > oom_before) if oom_before is not None and oom_after is not None else killed
    return {
        "ok": True,
        "exit": 128 - returncode if returncode < 0 else returncode,
        "timed_out": timed_out,
        "oom": bool(oom and killed and not timed_out),
        "duration": time.monotonic() - started,
        "out": stdout.wire(),
        "err": stderr.wire(),
    }


def write(request: dict[str, Any]) -> dict[str, Any]:
    with open(request["path"], "wb") as handle:
        handle.write(base64.b64decode(request["data"]))
    return {"ok": True}


def read(request: dict[str, Any]) -> dict[str, Any]:
    with open(request["path"], "rb") as handle:
        data = handle.read(request["limit"] + 1)
        size = os.fstat(handle.fileno()).st_size
    return {"ok": True, "data": base64.b64encode(data[: request["limit"]]).decode(), "size": size}


class ChunkWriter:
    """A file object that sends what it is given as raw chunk frames (`write_tree`'s output)."""

    def __init__(self) -> None:
        self.pending = bytearray()

    def write(self, data: bytes) -> int:
        self.pending += data
        if len(self.pending) >= CHUNK_SIZE:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.pending:
            send_raw(bytes(self.pending))
            self.pending.clear()


class ChunkReader:
    """A file object that reads raw chunk frames until the empty one (`read_tree`'s input)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.done = False

    def read(self, size: int = -1) -> bytes:
        while not self.done and (size < 0 or len(self.buffer) < size):
            length = int.from_bytes(read_exact(IN_FD, 4), "big")
            if length == 0:
                self.done = True
            else:
                self.buffer += read_exact(IN_FD, length)
        size = len(self.buffer) if size < 0 else size
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def drain(self) -> None:
        """Consume the rest of the stream, so the next request starts at a frame boundary."""
        while not self.done:
            self.buffer.clear()
            self.read(CHUNK_SIZE)


def snapshot(request: dict[str, Any]) -> dict[str, Any]:
    """Streams `path` (`workdir_stream.write_tree`) as raw chunk frames, then the empty frame; the status
    follows, with the counts and the seconds spent here."""
    started = time.monotonic()
    writer = ChunkWriter()
    try:
        counts = write_tree(os.fsencode(request["path"]), writer)
        writer.flush()
    finally:
        send_raw(b"")
    return {"ok": True, "seconds": time.monotonic() - started, **counts}


def restore(request: dict[str, Any]) -> dict[str, Any]:
    """Rebuilds `path` from the stream that follows the request as raw chunk frames
    (`workdir_stream.read_tree`); the status says how many seconds that took here, reading included."""
    started = time.monotonic()
    reader = ChunkReader()
    try:
        counts = read_tree(os.fsencode(request["path"]), reader)
    finally:
        reader.drain()
    return {"ok": True, "seconds": time.monotonic() - started, **counts}


OPERATIONS = {"exec": run, "write": write, "read": read, "snapshot": snapshot, "restore": restore}


def connect_host(path: str, token: str) -> int:
    """Connect to the host's rendezvous socket and authenticate; returns the connected fd (close-on-exec,
    so commands never inherit it). Raises OSError when the socket cannot be reached."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(token.encode("ascii") + b"\n")
    except OSError:
        sock.close()
        raise
    return sock.detach()


def serve(arguments: list[str]) -> None:
    global IN_FD, OUT_FD
    become_subreaper()
    hello: dict[str, Any] = {"ok": True, "hello": 1, "pid": os.getpid(), "transport": "attach"}
    if len(arguments) >= 2:
        try:
            fd = connect_host(arguments[0], arguments[1])
            hello["transport"] = "socket"
        except OSError as error:
            hello["socket_error"] = f"{type(error).__name__}: {error}"
    send(hello)  # always on stdout, so the host learns the transport over the channel it already has
    if hello["transport"] == "socket":
        IN_FD = OUT_FD = fd
    while True:
        try:
            request = json.loads(read_exact(IN_FD, int.from_bytes(read_exact(IN_FD, 4), "big")))
        except EOFError:
            return  # the host closed the channel
        operation = OPERATIONS.get(request.get("op"))
        if request.get("op") == "ping":
            send({"ok": True})
            continue
        try:
            send(operation(request) if operation else {"ok": False, "error": "unknown op"})
        except (OSError, ValueError, KeyError) as error:
            send({"ok": False, "error": f"{type(error).__name__}: {error}"})


if __name__ == "__main__":
    import sys

    serve(sys.argv[1:])
