#!/usr/bin/env bash
# Create the virtualenv and install agentrl and the env plugins from envs/ in editable mode.
# torch==2.13.0 goes first (on this machine that is the CPU wheel on disk; an unpinned torch would pull a
# multi-GB CUDA build). The packages the GPU check carries as wheels install at the versions
# scripts/gpu_wheels.txt pins (a pip constraints file), so a release on PyPI does not move what was tested
# (tests/unit/test_gpu_check.py). Skips everything when the inputs (pyproject files and those pins) are
# unchanged since the last run.
set -euo pipefail
VENV="${1:-.venv}"
STAMP="$VENV/.agentrl-setup"
inputs_hash() { cat pyproject.toml envs/*/pyproject.toml scripts/gpu_wheels.txt | sha256sum | cut -d' ' -f1; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ] && "$VENV/bin/python" -c "import agentrl" 2>/dev/null; then
    echo "python: $VENV up to date"
    exit 0
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
    echo "python: installing torch==2.13.0"
    "${PIP[@]}" "torch==2.13.0"
fi
echo "python: installing agentrl and env plugins (editable)"
PLUGINS=()
for dir in envs/*/; do [ -f "$dir/pyproject.toml" ] && PLUGINS+=(-e "$dir"); done
"${PIP[@]}" -c scripts/gpu_wheels.txt -e ".[dev]" "${PLUGINS[@]}"
# mini-swe-agent for the harness tests (agentrl/harness/minisweagent.py): without its dependencies, which are
# agentrl's own except litellm, textual and prompt_toolkit, none of which the adapter uses
"${PIP[@]}" --no-deps "mini-swe-agent==2.4.6"
inputs_hash > "$STAMP"
echo "python: done"
