#!/usr/bin/env bash
# `make demo`: held-out eval -> GRPO training -> held-out eval on the sandboxed calc task, on CPU.
# Prints the held-out success rate before and after training. Extra overrides: DEMO_ARGS="train.seed=1".
# Then the evidence (issue 41): the sharpening control (the base and the trained model evaluated at
# DEMO_CONTROL_T, default 0.3, on the same held-out tasks; DEMO_CONTROL_T= skips it) and one JSON with every
# evaluation's per-task outcomes, temperature, seeds, commit and CPU flags, written to runs/<run>/evidence.json
# and studies/calc-demo/results/demo/<run>.json. The 4-seed table of docs/benchmarks.md is the study
# studies/calc-demo, whose records are the four committed files converted (`agentrl study report calc-demo`);
# a further seed is added to that study file and played by `agentrl study run calc-demo` (docs/studies.md).
set -euo pipefail
start=$(date +%s)
name="demo-$(date +%Y%m%d-%H%M%S)"
control_t="${DEMO_CONTROL_T-0.3}"
.venv/bin/agentrl train --task calc "name=$name" ${DEMO_ARGS:-}
echo "demo wall time: $(( $(date +%s) - start )) s"
controls=()
if [[ -n "$control_t" ]]; then
  .venv/bin/agentrl eval --task calc "name=$name-control-base" "eval.temperature=$control_t" ${DEMO_ARGS:-}
  .venv/bin/agentrl eval --task calc "name=$name-control-trained" "eval.temperature=$control_t" \
    ${DEMO_ARGS:-} "model.name=$PWD/runs/$name/final"
  controls=(--control-before "runs/$name-control-base" --control-after "runs/$name-control-trained")
fi
.venv/bin/python -m agentrl.evidence "runs/$name" "${controls[@]}"
mkdir -p studies/calc-demo/results/demo
cp "runs/$name/evidence.json" "studies/calc-demo/results/demo/$name.json"
echo "evidence: studies/calc-demo/results/demo/$name.json (with controls: $(( $(date +%s) - start )) s)"
