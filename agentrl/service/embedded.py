"""`EmbeddedService`: run the env service as a child process on a free port (loopback unless told), for one
`with` block.

What this is: what `agentrl train`/`eval` and the integration tests use when no service URL is given, and what
each replica of a Ray fleet runs (`agentrl/service/ray_fleet.py`). The
child is `python -m agentrl.service` under the same interpreter and with the parent's import path (so a
module the parent can import, e.g. a test env, can be preloaded); its output goes to a log file the caller
names. Startup waits for `/healthz`; if the child dies first, the error carries the log's tail.

What this is not: a supervisor. It does not restart a crashed service; the client reports
`ServiceUnavailable` and the episode ends as an infrastructure failure.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from agentrl.errors import ServiceUnavailable
from agentrl.service.server import PARENT_PID_ENV

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on `host` now (the kernel's pick; another process may take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def free_loopback_port() -> int:
    return free_port(LOOPBACK)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class EmbeddedService:
    """Context manager: `with EmbeddedService(log_path) as service: EnvClient(service.url)`."""

    def __init__(
        self,
        log_path: Path,
        *,
        preload: Sequence[str] = (),
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 30.0,
        host: str = LOOPBACK,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.log_path = Path(log_path)
        self.host = host  # anything but loopback needs AGENTRL_SERVICE_TOKEN (the service refuses otherwise)
        self.extra_args = tuple(extra_args)  # more `python -m agentrl.service` options, e.g. --max-sessions
        self.preload = tuple(preload)
        self.env_kwargs = env_kwargs
        self.startup_timeout_s = startup_timeout_s
        # SIGTERM first: the service removes its sandboxes (within two `shutdown_timeout_s` plus removals)
        self.stop_timeout_s = stop_timeout_s
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self._process is None:
            raise ServiceUnavailable("the embedded env service is not running; use it inside `with`")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The service process's pid: the owner its sandboxes name (`agentrl.owner`)."""
        if self._process is None:
            raise ServiceUnavailable("the embedded env service is not running; use it inside `with`")
        return self._process.pid

    def __enter__(self) -> EmbeddedService:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.port = free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT, env=self._child_environment()
            )
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "agentrl.service", "--host", self.host, "--port", str(self.port)]
        for module in self.preload:
            command += ["--preload", module]
        if self.env_kwargs:
            command += ["--env-kwargs", json.dumps({k: dict(v) for k, v in self.env_kwargs.items()})]
        return [*command, *self.extra_args]

    def _child_environment(self) -> dict[str, str]:
        path = [entry or os.getcwd() for entry in sys.path]
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(path),
            "PYTHONUNBUFFERED": "1",
            PARENT_PID_ENV: str(os.getpid()),  # the service exits if we die without stopping it
        }

    def _wait_until_healthy(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise ServiceUnavailable(
                    f"the embedded env service exited with code {code} before answering /healthz. "
                    f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if _answers(f"{self.url}/healthz"):
                return
            time.sleep(0.1)
        raise ServiceUnavailable(
            f"the embedded env service did not answer /healthz within {self.startup_timeout_s:g} s. "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0, trust_env=False).status_code == 200
    except httpx.TransportError:
        return False
