#!/usr/bin/env bash
# `make test-gpu`: the GPU path proven by one command (agentrl/devtools/gpu_check.py; docs/gpu.md).
#   bash scripts/gpu_check.sh OUT_DIR [--only CHECK,...]
# Without CUDA it skips: OUT_DIR/gpu_check.json says so, exit 0. With CUDA it installs agentrl's other
# dependencies from the wheels of scripts/gpu_wheels.sh (.gpu-wheels/, no network) into a folder of their
# own on PYTHONPATH, only those the machine's Python lacks (never its torch or transformers), runs every
# check, writes OUT_DIR/gpu_check.json and exits 1 if any check failed.
# PY: the Python to use (make passes .venv/bin/python; elsewhere the machine's python3).
# GPU_WHEELS: the wheel folder (.gpu-wheels); GPU_DEPS: where they are installed (a fresh temp folder).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu_check.sh OUT_DIR [--only CHECK,...]}
shift
if [ ! -x "${PY:-}" ]; then PY=$(command -v python3 || command -v python); fi
WHEELS=${GPU_WHEELS:-.gpu-wheels}
mkdir -p "$OUT"

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    exec "$PY" -m agentrl.devtools.gpu_check "$OUT" "$@"  # writes the skip report
fi

if [ -d "$WHEELS" ]; then
    DEPS=${GPU_DEPS:-$(mktemp -d "${TMPDIR:-/tmp}/agentrl-gpu-deps.XXXXXX")}
    PY="$PY" bash scripts/gpu_deps.sh "$WHEELS" "$DEPS"
    export PYTHONPATH="$PWD:$DEPS${PYTHONPATH:+:$PYTHONPATH}"
else
    echo "gpu check: no $WHEELS folder (bash scripts/gpu_wheels.sh makes it); using this Python's packages"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$PY" -m agentrl.devtools.gpu_check "$OUT" "$@"
