"""`agentrl sandbox build|ls|prune`: the sandbox images and the sandbox containers on this engine.

What this is: thin handlers over `scripts/build_images.sh` (build: the debootstrap base, then every
`sandboxes/<name>/Dockerfile`, each only when its inputs changed), the engine's image and container lists
(ls), and the label-based reapers of `agentrl.sandbox.docker` (prune). What this is not: a way to start
sandboxes (envs and the pool do that) or a registry client (no image is pulled or pushed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError, SandboxUnavailable

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_images.sh"
IMAGE_LABEL = "agentrl.inputs"  # set by scripts/build_images.sh and sandboxes/base/build.sh


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("sandbox", help="build, list and prune sandbox images and containers")
    parser.add_argument("action", choices=["build", "ls", "prune"], help="what to do")
    parser.add_argument(
        "--all",
        action="store_true",
        help="prune: remove every agentrl sandbox container, not only orphans of dead processes",
    )
    parser.add_argument(
        "--base",
        metavar="IMAGE",
        help="build: use IMAGE (e.g. python:3.11-slim-bookworm from your registry) as the base instead of "
        "the offline debootstrap image; it is pulled when missing and must have python3 and useradd",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    actions = {"build": build, "ls": list_all, "prune": prune}
    return actions[args.action](args)


def build(args: argparse.Namespace) -> int:
    if not BUILD_SCRIPT.exists():
        raise ConfigError(
            f"{BUILD_SCRIPT} is missing; run `agentrl sandbox build` from a checkout of agentrl"
        )
    return subprocess.run(["bash", str(BUILD_SCRIPT)], env=build_env(args.base), check=False).returncode


def build_env(base: str | None, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The build script's environment: AGENTRL_BASE_IMAGE set to `base` when one is given; pure."""
    return {**environ, **({"AGENTRL_BASE_IMAGE": base} if base else {})}


def list_all(args: argparse.Namespace) -> int:
    from agentrl.sandbox.docker import (
        OWNER_LABEL,
        SERVICE_LABEL,
        SESSION_LABEL,
        docker_client,
        labelled_containers,
    )

    client = docker_client()
    print("images:")
    for image in client.api.images(filters={"label": IMAGE_LABEL}):
        for tag in image.get("RepoTags") or ["<untagged>"]:
            print(f"  {tag:40s} {image['Size'] / 2**20:8.0f} MB  {_age(image['Created'])}")
    print("containers:")
    for entry in labelled_containers({SERVICE_LABEL: ""}, client):
        labels = entry.get("Labels") or {}
        print(
            f"  {entry['Id'][:12]}  {labels.get(SERVICE_LABEL, '-'):20s} {entry['State']:8s} "
            f"{_age(entry['Created']):>8s}  session {labels.get(SESSION_LABEL, '-')[:12]}  "
            f"owner {labels.get(OWNER_LABEL, '-')}"
        )
    return 0


def prune(args: argparse.Namespace) -> int:
    from agentrl.sandbox.docker import SERVICE_LABEL, docker_client, reap, reap_orphans

    client = docker_client()
    removed = reap({SERVICE_LABEL: ""}, client) if args.all else reap_orphans(None, client)
    print(f"removed {removed} sandbox container{'s' if removed != 1 else ''}")
    try:
        client.api.prune_images(filters={"dangling": True, "label": IMAGE_LABEL})
    except Exception as error:  # noqa: BLE001 - image pruning is best effort
        raise SandboxUnavailable(f"could not prune old sandbox images ({error})") from error
    return 0


def _age(created: int) -> str:
    seconds = max(0, int(time.time()) - int(created))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
