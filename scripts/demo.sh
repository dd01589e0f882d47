#!/usr/bin/env bash
# `make demo`: held-out eval -> GRPO training -> held-out eval on the sandboxed calc task, on CPU.
# Prints the held-out success rate before and after training. Extra overrides: DEMO_ARGS="train.seed=1".
set -euo pipefail
start=$(date +%s)
.venv/bin/agentrl train --task calc ${DEMO_ARGS:-}
echo "demo wall time: $(( $(date +%s) - start )) s"
