"""The host side of the browser driver: start it in a sandbox, then send it one request per `exec`.

What this is: `BrowserSession`, which uploads `driver.py` and `shop.py` into the sandbox's /tmp, starts the
driver in the background (it outlives the `exec` that starts it: the exec channel leaves background
processes of finished commands alone) and waits for its unix socket; `request(...)` is then one short
`exec` of the driver's tiny stdlib client with the JSON request on stdin. Also `web_sandbox_config`, the
web image's limits: Chromium needs far more memory and processes than the sandbox defaults allow, so the
env asks for them here instead of weakening the defaults.

What this is not: the env (see `agentrl_web.env`). Driver replies with ok=false (a missing element id, a
failed click) are returned as data; a driver that does not start or answer raises `EnvError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.errors import EnvError
from agentrl.sandbox.docker import DockerSandbox
from agentrl.sandbox.limits import SandboxConfig
from agentrl_web.driver import CLIENT_SOURCE

WEB_IMAGE = "agentrl/sandbox-web:latest"
DRIVER_DIR = "/tmp/agentrl-web"
SOCKET_PATH = f"{DRIVER_DIR}/driver.sock"
STARTUP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 20.0
PACKAGE_DIR = Path(__file__).resolve().parent


def web_sandbox_config(**overrides: Any) -> SandboxConfig:
    """The web image with room for Chromium: 1 GiB, 512 processes/threads, 2 MiB of output per exec (a
    screenshot travels as base64 on stdout), 256 MiB tmpfs (Chromium's profile and cache live in /tmp)."""
    settings: dict[str, Any] = {
        "image": WEB_IMAGE,
        "memory": "1g",
        "pids": 512,
        "tmpfs_size": "256m",
        "output_limit_bytes": 4 << 20,
        "command_timeout_s": REQUEST_TIMEOUT_S,
        **overrides,
    }
    return SandboxConfig(**settings)


START_SCRIPT = f"""
set -e
mkdir -p {DRIVER_DIR}
cd {DRIVER_DIR}
setsid python3 driver.py {SOCKET_PATH} > driver.log 2>&1 < /dev/null &
i=0
while [ ! -S {SOCKET_PATH} ]; do
  i=$((i+1))
  if [ $i -gt {int(STARTUP_TIMEOUT_S * 20)} ] || ! kill -0 $! 2>/dev/null; then cat driver.log >&2; exit 1; fi
  sleep 0.05
done
"""


class BrowserSession:
    """A started browser driver in `sandbox`."""

    def __init__(self, sandbox: DockerSandbox) -> None:
        self.sandbox = sandbox
        for name in ("driver.py", "shop.py"):
            source = (PACKAGE_DIR / name).read_text()
            result = sandbox.exec(
                ["sh", "-c", f'mkdir -p {DRIVER_DIR} && cat > "$1"', "sh", f"{DRIVER_DIR}/{name}"],
                stdin=source,
            )
            if result.exit_code != 0:
                raise EnvError(f"could not upload the browser driver: {result.stderr.strip()}")
        started = sandbox.exec(["sh", "-c", START_SCRIPT], timeout=STARTUP_TIMEOUT_S + 5)
        if started.exit_code != 0:
            raise EnvError(
                "the browser driver did not start in the sandbox (is agentrl/sandbox-web built? "
                f"run sandboxes/web/build.sh): {(started.stderr or started.stdout).strip()[-2000:]}"
            )

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request; the driver's reply (ok=false replies are data, not errors)."""
        result = self.sandbox.exec(
            ["python3", "-I", "-S", "-c", CLIENT_SOURCE, SOCKET_PATH],
            stdin=json.dumps({"op": op, **fields}),
            timeout=REQUEST_TIMEOUT_S,
        )
        if result.exit_code != 0 or result.truncated:
            raise EnvError(
                f"the browser driver failed on {op!r} (exit {result.exit_code}, "
                f"timed out: {result.timed_out}): "
                f"{result.stderr.strip()[-1000:]}"
            )
        try:
            reply: dict[str, Any] = json.loads(result.stdout)
        except ValueError as error:
            raise EnvError(
                f"the browser driver answered {op!r} with non-JSON: {result.stdout[:200]!r}"
            ) from error
        return reply
