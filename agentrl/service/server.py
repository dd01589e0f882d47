"""`python -m agentrl.service`: run the env service under uvicorn.

What this is: command-line parsing into `ServiceSettings` and one `uvicorn.run`, after which every sandbox
this process still owns is removed (`agentrl.service.cleanup.remove_own_sandboxes`). Unset options keep the
defaults of `ServiceSettings`. SIGTERM (uvicorn's handler; the process may be PID 1 in a container, which has
no default one) shuts down gracefully within `shutdown_timeout_s` twice over. The bearer token comes from the
AGENTRL_SERVICE_TOKEN environment variable (not a flag: command lines are visible to every user); binding
anything but loopback without a token is refused. What this is not: TLS termination or a process manager; put
a load balancer or proxy in front.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentrl.errors import AgentRLError, ConfigError
from agentrl.service.settings import ServiceSettings
from agentrl.wire import TOKEN_ENV


def parse_settings(argv: Sequence[str] | None = None) -> ServiceSettings:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.service", description="Run the agentrl env service."
    )
    parser.add_argument("--host", help=f"interface to bind; non-loopback needs {TOKEN_ENV}")
    parser.add_argument("--port", type=int)
    parser.add_argument("--max-sessions", dest="max_sessions", type=int)
    parser.add_argument("--idle-timeout", dest="idle_timeout_s", type=float, help="seconds")
    parser.add_argument("--step-timeout", dest="step_timeout_s", type=float, help="seconds")
    parser.add_argument("--max-body-bytes", dest="max_body_bytes", type=int)
    parser.add_argument("--orphan-grace", dest="orphan_grace_s", type=float, help="seconds")
    parser.add_argument(
        "--orphan-reap-interval", dest="orphan_reap_interval_s", type=float, help="seconds; 0: off"
    )
    parser.add_argument("--shutdown-timeout", dest="shutdown_timeout_s", type=float, help="seconds")
    parser.add_argument("--preload", action="append", help="module to import at startup (repeatable)")
    parser.add_argument("--env-kwargs", dest="env_kwargs", type=json.loads, help='JSON: {"env id": {kwargs}}')
    given: dict[str, Any] = {
        key: value for key, value in vars(parser.parse_args(argv)).items() if value is not None
    }
    if "preload" in given:
        given["preload"] = tuple(given["preload"])
    token = os.environ.get(TOKEN_ENV) or None
    settings = ServiceSettings(**given, token=token)
    check_bind(settings.host, settings.token)
    return settings


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to bind a non-loopback address without a token: anyone who can reach it could run envs."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to bind {host!r} without authentication: set {TOKEN_ENV} to a long random secret "
            f"(e.g. `export {TOKEN_ENV}=$(openssl rand -hex 32)`) in the service's and the clients' "
            "environment, or bind a loopback address such as 127.0.0.1"
        )


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    from agentrl.service.app import create_app

    try:
        settings = parse_settings(argv)
        app = create_app(settings)
    except AgentRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from agentrl.service.cleanup import remove_own_sandboxes

    watch_parent(os.environ.get(PARENT_PID_ENV))
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level="info",
            ws_ping_interval=settings.ws_ping_interval_s,
            ws_ping_timeout=settings.ws_ping_timeout_s,
            timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout_s),  # uvicorn takes whole seconds
        )
    finally:
        remove_own_sandboxes()
    return 0


PARENT_PID_ENV = "AGENTRL_EXIT_WITH_PARENT"


def watch_parent(parent_pid: str | None, interval_s: float = 1.0) -> None:
    """When `parent_pid` is set, shut down (SIGTERM to ourselves: uvicorn closes sessions and sandboxes)
    as soon as that process is gone, so an embedded service never outlives a killed trainer."""
    if not parent_pid:
        return
    expected = int(parent_pid)

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
