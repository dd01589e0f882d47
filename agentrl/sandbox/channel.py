"""The host end of the persistent exec channel: one `docker exec` socket kept open per container.

What this is: `ExecChannel` starts `channel_server.py` inside a running container with a single
`docker exec -i` (python3 -I -S -c <source>), keeps the hijacked socket, and speaks its framed protocol:
requests are written raw to the exec's stdin; replies come back inside Docker's multiplexed stream frames
(8-byte header: stream type, 3 zero bytes, big-endian size) and carry our own frames (4-byte big-endian
length + UTF-8 JSON). A tool call then costs one round trip over a socket already open instead of a new
`docker exec` (~71 ms on this machine; see shared/docs/FACTS.md).

What this is not: a sandbox (`agentrl/sandbox/docker.py` owns the container and its limits) or thread-safe
for concurrent requests on one channel (a lock serialises them). Any failure of the socket or the server
raises `SandboxLost`; after that the channel stays broken.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from pathlib import Path
from typing import Any

import docker.errors

from agentrl.errors import SandboxLost
from agentrl.sandbox.base import OutputCapture

SERVER_SOURCE = (Path(__file__).parent / "channel_server.py").read_text(encoding="utf-8")
SERVER_ARGV = ["python3", "-I", "-S", "-c", SERVER_SOURCE]
DOCKER_HEADER_SIZE = 8
STDOUT_STREAM, STDERR_STREAM = 1, 2
SERVER_STDERR_KEPT = 4096  # bytes of the server's own stderr kept for error messages
RECV_SIZE = 1 << 16
UPLOAD_CHUNK = 1 << 20


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

    def __init__(self, api: Any, container_id: str, user: str, workdir: str, hello_timeout_s: float) -> None:
        self.container_id = container_id
        self._lock = threading.Lock()
        self._raw = bytearray()  # undecoded Docker frames
        self._replies = bytearray()  # the server's stdout, i.e. our reply frames
        self._server_stderr = bytearray()
        self._broken: str | None = None
        self._sock = _open_socket(api, container_id, user, workdir)
        self._receive(hello_timeout_s)

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
        try:
            self._sock.close()
        except OSError:
            pass

    def _send(self, data: bytes) -> None:
        if self._broken is not None:
            raise SandboxLost(f"the exec channel is broken ({self._broken}); start a new sandbox")
        try:
            self._sock.sendall(data)
        except OSError as error:
            raise self._fail(f"sending failed: {error}") from error

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        return dict(json.loads(self._receive_frame(timeout_s)))

    def _receive_frame(self, timeout_s: float) -> bytes:
        self._sock.settimeout(timeout_s)
        while True:
            body = take_frame(self._replies)
            if body is not None:
                return body
            try:
                chunk = self._sock.recv(RECV_SIZE)
            except (TimeoutError, OSError) as error:
                raise self._fail(f"no reply within {timeout_s:g}s ({error})") from error
            if not chunk:
                raise self._fail("the server or its container ended")
            self._raw += chunk
            for stream, payload in split_docker_frames(self._raw):
                if stream == STDOUT_STREAM:
                    self._replies += payload
                elif len(self._server_stderr) < SERVER_STDERR_KEPT:
                    self._server_stderr += payload[: SERVER_STDERR_KEPT - len(self._server_stderr)]

    def _fail(self, reason: str) -> SandboxLost:
        detail = self._server_stderr.decode("utf-8", "replace").strip()
        self._broken = reason + (f"; server said: {detail[-500:]}" if detail else "")
        self.close()
        return SandboxLost(f"lost the exec channel of container {self.container_id[:12]} ({self._broken})")


def _open_socket(api: Any, container_id: str, user: str, workdir: str) -> socket.socket:
    """Start the server with one `docker exec -i` and return our own duplicate of its hijacked socket."""
    try:
        exec_id = api.exec_create(container_id, SERVER_ARGV, stdin=True, user=user, workdir=workdir)["Id"]
        wrapped = api.exec_start(exec_id, socket=True)
    except docker.errors.NotFound as error:
        raise SandboxLost(f"the sandbox container vanished ({error}); start a new one") from error
    except docker.errors.APIError as error:
        raise SandboxLost(f"could not start the exec channel ({error}); start a new sandbox") from error
    raw: socket.socket = getattr(wrapped, "_sock", wrapped)
    # a duplicate we own: the HTTP response object that wraps `raw` may be garbage-collected and close it
    sock = raw.dup()
    raw.close()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock
