"""The vLLM side of `bench/engine.py --vllm-peer`, run under .venv-vllm (vLLM's CPU build, `make setup-vllm`).

    .venv-vllm/bin/python bench/engine_vllm_worker.py --workload '{"episodes": 32, ...}' [--eager]

Builds the vLLM engine as `engine.kind=vllm` does (`create_vllm_engine`: the trainer's HF module and a
colocated `vllm.LLM`), then answers one line of stdin at a time: `run` plays the workload once through it
(the same episodes and sampling as the cached engine in the parent) and prints one result line, `quit` ends.
Its result lines start with RESULT_PREFIX (vLLM logs to stdout too):
- the first, once the engine is built: `load_s` (create_vllm_engine, wall), `vllm_version`, `allocator`;
- one per `run`: `tokens` sampled, `seconds` wall, `prompt_tokens` and `cached_prompt_tokens` (what vLLM's
  prefix cache served).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULT_PREFIX = "ENGINE-BENCH-RESULT "


def emit(result: dict[str, object]) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, help="the Workload's fields as JSON")
    parser.add_argument("--eager", action="store_true", help="engine.vllm.enforce_eager=true (no compile)")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from agentrl.memory import choose_allocator

    allocator = choose_allocator()  # as `agentrl train` picks it (may re-exec under tcmalloc)

    import vllm
    from engine import Workload, run_workload, sampled_count

    from agentrl.agent.engines.base import SamplingParams
    from agentrl.agent.engines.vllm import VLLMEngineConfig, create_vllm_engine
    from agentrl.model_config import ModelConfig

    workload = Workload(**json.loads(args.workload))
    started = time.perf_counter()
    engine = create_vllm_engine(ModelConfig(), VLLMEngineConfig(enforce_eager=args.eager))
    emit(
        {
            "load_s": time.perf_counter() - started,
            "vllm_version": vllm.__version__,
            "allocator": allocator,
            "enforce_eager": args.eager,
        }
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=workload.new_tokens, stop=())
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        if command != "run":
            continue
        prompt_before, cached_before = engine.prompt_tokens, engine.cached_prompt_tokens
        traces, seconds = run_workload(engine, engine.tokenizer, workload, params)
        emit(
            {
                "tokens": sampled_count(traces),
                "seconds": seconds,
                "prompt_tokens": engine.prompt_tokens - prompt_before,
                "cached_prompt_tokens": engine.cached_prompt_tokens - cached_before,
            }
        )
    engine.close()
    return 0


if __name__ == "__main__":  # vLLM may start processes that import this module: build nothing at import
    sys.exit(main())
