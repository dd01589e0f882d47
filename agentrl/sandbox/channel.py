"""The host end of the persistent exec channel: one server per container, one socket round trip per request.

What this is: `ExecChannel` starts `channel_server.py` inside a running container with a single
`docker exec -i` (python3 -I -S -c <source>: `workdir_stream.py`'s source, then the server's), keeps the
hijacked socket, and speaks its framed protocol
(our frames: 4-byte big-endian length + UTF-8 JSON). Two transports:
- `attach`: requests are written raw to the exec's stdin; replies come back inside Docker's multiplexed
  stream frames (8-byte header: stream type, 3 zero bytes, big-endian size). Works with any engine, local or
  remote, but every byte is relayed by dockerd and the container's shim (costs: docs/sandbox.md,
  `bench/sandbox.py`).
- `socket`: a `Rendezvous` is a per-sandbox host directory, bind-mounted read-only into the container at
  `CHANNEL_MOUNT`, holding a listening unix socket. The server connects to it and sends a one-time token; the
  host accepts one connection with that token, then unlinks the socket and closes the listener, so nothing
  else can ever connect. Requests and replies then go straight between the two processes (one kernel hop).
  Needs an engine on this host (the bind source is a path on our filesystem) and runc (gVisor does not
  pass host unix sockets by default); `socket_transport_possible` decides, the config can force either.
  Where the engine turns out not to share our filesystem, the first sandbox falls back and later ones skip it.
Either way a tool call costs one round trip over a connection already open instead of a new `docker exec`
(the measured costs of both are in docs/sandbox.md, "Measured", from `bench/sandbox.py`).

What this is not: a sandbox (`agentrl/sandbox/docker.py` owns the container and its limits) or thread-safe
for concurrent requests on one channel (a lock serialises them). Any failure of the socket or the server
raises `SandboxLost`; after that the channel stays broken.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import docker.errors
import docker.types

from agentrl.errors import SandboxLost
from agentrl.sandbox.base import OutputCapture

FUTURE_IMPORT = "from __future__ import annotations\n"


def server_source(*modules: str) -> str:
    """The sources of `modules` as one program, in order: a `from __future__` import may only open a file,
    so it is kept in the first and dropped from the others; pure."""
    first, *rest = modules
    return "\n".join([first, *(module.replace(FUTURE_IMPORT, "", 1) for module in rest)])


SERVER_SOURCE = server_source(
    *(
        (Path(__file__).parent / name).read_text(encoding="utf-8")
        for name in ("workdir_stream.py", "channel_server.py")
    )
)
SERVER_ARGV = ["python3", "-I", "-S", "-c", SERVER_SOURCE]
DOCKER_HEADER_SIZE = 8
STDOUT_STREAM, STDERR_STREAM = 1, 2
SERVER_STDERR_KEPT = 4096  # bytes of the server's own stderr kept for error messages
STDERR_DRAIN_S = 0.2  # on a failure of the socket transport, how long to collect the server's stderr
RECV_SIZE = 1 << 16
UPLOAD_CHUNK = 1 << 20
CHANNEL_MOUNT = "/run/agentrl-channel"  # where a sandbox sees its rendezvous directory (read-only)
SOCKET_NAME = "s"
RENDEZVOUS_PREFIX = "agentrl-channel-"  # host dirs are <tmp>/agentrl-channel-<pid>-<random>


def frame(message: dict[str, Any]) -> bytes:
    """One request frame: 4-byte big-endian length + compact JSON; pure."""
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return len(body).to_bytes(4, "big") + body


def split_docker_frames(buffer: bytearray) -> list[tuple[int, bytes]]:
    """Remove every complete Docker stream frame from the front of `buffer`; returns (stream, payload)."""
    frames: list[tuple[int, bytes]] = []
    while len(buffer) >= DOCKER_HEADER_SIZE:
        size = int.from_bytes(buffer[4:8], "big")
        if len(buffer) < DOCKER_HEADER_SIZE + size:
            break
        frames.append((buffer[0], bytes(buffer[DOCKER_HEADER_SIZE : DOCKER_HEADER_SIZE + size])))
        del buffer[: DOCKER_HEADER_SIZE + size]
    return frames


def take_frame(buffer: bytearray) -> bytes | None:
    """Remove one complete frame (4-byte big-endian length + body) from the front of `buffer` and return
    its body, or None while it is incomplete; pure apart from consuming `buffer`."""
    if len(buffer) < 4:
        return None
    size = int.from_bytes(buffer[:4], "big")
    if len(buffer) < 4 + size:
        return None
    body = bytes(buffer[4 : 4 + size])
    del buffer[: 4 + size]
    return body


def take_message(buffer: bytearray) -> dict[str, Any] | None:
    """Remove and decode one complete JSON reply frame from the front of `buffer`, or None if incomplete."""
    body = take_frame(buffer)
    return None if body is None else dict(json.loads(body))


def capture_from_wire(wire: list[Any], limit: int) -> OutputCapture:
    """Rebuild the host-side `OutputCapture` from the server's [head_b64, tail_b64, total]."""
    head, tail, total = base64.b64decode(wire[0]), base64.b64decode(wire[1]), int(wire[2])
    return OutputCapture.from_parts(limit, head, tail, total)


class ExecChannel:
    """A request/reply connection to the server inside one container."""

    def __init__(
        self,
        api: Any,
        container_id: str,
        user: str,
        workdir: str,
        hello_timeout_s: float,
        rendezvous: Rendezvous | None = None,
    ) -> None:
        self.container_id = container_id
        self._lock = threading.Lock()
        self._raw = bytearray()  # undecoded Docker frames
        self._replies = bytearray()  # the server's stdout, i.e. our reply frames
        self._server_stderr = bytearray()
        self._broken: str | None = None
        self._direct: socket.socket | None = None
        arguments = rendezvous.server_arguments() if rendezvous is not None else []
        self._sock = _open_socket(api, container_id, user, workdir, arguments)
        hello = self._receive(hello_timeout_s)
        self.transport = "attach"
        self.socket_error: str | None = hello.get("socket_error")
        if rendezvous is not None and hello.get("transport") == "socket":
            try:
                self._direct = rendezvous.accept(hello_timeout_s)
            except OSError as error:
                raise self._fail(f"the server connected but the host could not accept it: {error}") from error
            self.transport = "socket"

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request and wait up to `timeout_s` for its reply; `SandboxLost` on any failure."""
        with self._lock:
            self._send(frame(message))
            return self._receive(timeout_s)

    def download(self, message: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], bytes]:
        """A request answered by raw chunk frames, an empty frame, then the JSON status (e.g. `tar`)."""
        with self._lock:
            self._send(frame(message))
            chunks = []
            while chunk := self._receive_frame(timeout_s):
                chunks.append(chunk)
            return self._receive(timeout_s), b"".join(chunks)

    def upload(self, message: dict[str, Any], data: bytes, timeout_s: float) -> dict[str, Any]:
        """A request followed by `data` as raw chunk frames and an empty frame (e.g. `untar`)."""
        with self._lock:
            self._send(frame(message))
            for start in range(0, len(data), UPLOAD_CHUNK):
                chunk = data[start : start + UPLOAD_CHUNK]
                self._send(len(chunk).to_bytes(4, "big") + chunk)
            self._send(bytes(4))
            return self._receive(timeout_s)

    def close(self) -> None:
        self._broken = self._broken or "closed"
        for sock in (self._direct, self._sock):
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def _send(self, data: bytes) -> None:
        if self._broken is not None:
            raise SandboxLost(f"the exec channel is broken ({self._broken}); start a new sandbox")
        try:
            (self._direct or self._sock).sendall(data)
        except OSError as error:
            raise self._fail(f"sending failed: {error}") from error

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        return dict(json.loads(self._receive_frame(timeout_s)))

    def _receive_frame(self, timeout_s: float) -> bytes:
        sock = self._direct or self._sock
        sock.settimeout(timeout_s)
        while True:
            body = take_frame(self._replies)
            if body is not None:
                return body
            try:
                chunk = sock.recv(RECV_SIZE)
            except (TimeoutError, OSError) as error:
                raise self._fail(f"no reply within {timeout_s:g}s ({error})") from error
            if not chunk:
                raise self._fail("the server or its container ended")
            if self._direct is not None:
                self._replies += chunk
            else:
                self._absorb_attach(chunk)

    def _absorb_attach(self, chunk: bytes) -> None:
        """Split Docker stream frames: the server's stdout carries replies, its stderr is kept for errors."""
        self._raw += chunk
        for stream, payload in split_docker_frames(self._raw):
            if stream == STDOUT_STREAM:
                self._replies += payload
            elif len(self._server_stderr) < SERVER_STDERR_KEPT:
                self._server_stderr += payload[: SERVER_STDERR_KEPT - len(self._server_stderr)]

    def _fail(self, reason: str) -> SandboxLost:
        if self._direct is not None:  # the server's last words (a traceback) are still on the attach stream
            self._drain_attach(STDERR_DRAIN_S)
        detail = self._server_stderr.decode("utf-8", "replace").strip()
        self._broken = reason + (f"; server said: {detail[-500:]}" if detail else "")
        self.close()
        return SandboxLost(f"lost the exec channel of container {self.container_id[:12]} ({self._broken})")

    def _drain_attach(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                self._sock.settimeout(left)
                chunk = self._sock.recv(RECV_SIZE)
                if not chunk:
                    return
                self._absorb_attach(chunk)
        except OSError:
            return


class Rendezvous:
    """A host directory with a listening unix socket for one sandbox's `socket` transport (module docstring).

    Lifecycle: create before the container (its `mount()` goes into the container options), `listen()` just
    before the server starts, `accept()` once the server says it connected, `close()` with the sandbox.
    """

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix=f"{RENDEZVOUS_PREFIX}{os.getpid()}-")
        os.chmod(self.directory, 0o711)  # the sandbox user may traverse it, nobody may list it
        self.token = secrets.token_hex(16)
        self._listener: socket.socket | None = None

    @property
    def path(self) -> str:
        return os.path.join(self.directory, SOCKET_NAME)

    def mount(self) -> docker.types.Mount:
        return docker.types.Mount(CHANNEL_MOUNT, self.directory, type="bind", read_only=True)

    def server_arguments(self) -> list[str]:
        """Listen now and return the server's extra argv: the in-container socket path and the token."""
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o666)  # any uid in the container may connect; the token says who is ours
        self._listener.listen(4)
        return [f"{CHANNEL_MOUNT}/{SOCKET_NAME}", self.token]

    def accept(self, timeout_s: float) -> socket.socket:
        """The server's connection (the first one that presents the token); then nothing can connect again."""
        if self._listener is None:
            raise OSError("the rendezvous socket is not listening")
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                self._listener.settimeout(max(deadline - time.monotonic(), 0.001))
                conn, _ = self._listener.accept()
                if hmac.compare_digest(_read_line(conn, deadline), self.token.encode("ascii")):
                    conn.settimeout(None)
                    return conn
                conn.close()  # not our server (the token is only ever in its argv)
        finally:
            self._stop_listening()

    def close(self) -> None:
        self._stop_listening()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _read_line(conn: socket.socket, deadline: float, limit: int = 128) -> bytes:
    """Bytes up to a newline (excluded), at most `limit`, by `deadline`; OSError on timeout."""
    data = bytearray()
    while b"\n" not in data and len(data) <= limit:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = conn.recv(limit)
        if not chunk:
            break
        data += chunk
    return bytes(data.split(b"\n", 1)[0])


_socket_failure: list[str] = []  # why the socket transport failed in this process, once it has


def socket_transport_possible(runtime: str | None) -> str | None:
    """Why the `socket` transport cannot work here, or None if it may: it needs the engine on this host
    (DOCKER_HOST unset or unix://; the bind source is a path on our filesystem) and the default runtime, and
    it must not have failed earlier in this process (`remember_socket_failure`: e.g. an engine that runs
    elsewhere behind a mounted socket, where the bind source does not exist or holds no socket)."""
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host and not docker_host.startswith("unix://"):
        return f"the Docker engine is remote (DOCKER_HOST={docker_host})"
    if runtime is not None:
        return f"runtime {runtime!r} may not pass host unix sockets"
    return _socket_failure[0] if _socket_failure else None


def remember_socket_failure(reason: str) -> None:
    """Later sandboxes of this process go straight to `attach` (see `socket_transport_possible`)."""
    if not _socket_failure:
        _socket_failure.append(reason)


def reap_rendezvous_dirs(root: str | None = None) -> int:
    """Remove rendezvous directories left by processes that no longer exist (e.g. killed with SIGKILL)."""
    root = root or tempfile.gettempdir()
    removed = 0
    for entry in os.scandir(root):
        pid = entry.name[len(RENDEZVOUS_PREFIX) :].split("-", 1)[0]
        if entry.name.startswith(RENDEZVOUS_PREFIX) and pid.isdigit() and not pid_exists(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists on this host (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _open_socket(api: Any, container_id: str, user: str, workdir: str, arguments: list[str]) -> socket.socket:
    """Start the server with one `docker exec -i` and return our own duplicate of its hijacked socket."""
    try:
        argv = SERVER_ARGV + arguments
        exec_id = api.exec_create(container_id, argv, stdin=True, user=user, workdir=workdir)["Id"]
        wrapped = api.exec_start(exec_id, socket=True)
    except docker.errors.NotFound as error:
        raise SandboxLost(f"the sandbox container vanished ({error}); start a new one") from error
    except docker.errors.APIError as error:
        raise SandboxLost(f"could not start the exec channel ({error}); start a new sandbox") from error
    raw: socket.socket = getattr(wrapped, "_sock", wrapped)
    # a duplicate we own: the HTTP response object that wraps `raw` may be garbage-collected and close it
    sock = raw.dup()
    _close_hijacked(wrapped, raw)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


def _close_hijacked(wrapped: Any, raw: socket.socket) -> None:
    """Close docker-py's objects around the hijacked socket once we hold our duplicate: its file object
    (`wrapped`, which keeps the socket's descriptor open until it is closed itself), the HTTP response it
    keeps alive, and the socket. Left to the garbage collector, they form a cycle whose socket may be
    finalized first, still open (a ResourceWarning for every sandbox)."""
    for owned in (getattr(wrapped, "_response", None), wrapped, raw):  # the response first: it flushes
        try:
            if owned is not None:
                owned.close()
        except (OSError, ValueError):
            pass
