"""agentrl-env-swebench: repair a real Python repository until its failing tests pass (SWE-bench style).

Importing this package registers `agentrl/SWEBench-v0` (the `agentrl.envs` entry point names this module).
Tasks: official SWE-bench records (`agentrl_swebench.records`), e.g. the offline set in
`tasks/swebench-local/` made by `scripts/swebench_make_tasks.py`; images: `scripts/build_swebench_images.sh`;
interaction: `agentrl_swebench.env`; grading: `agentrl_swebench.grading`.
"""

from agentrl.env import register

register(id="agentrl/SWEBench-v0", entry_point="agentrl_swebench.env:SWEBenchEnv")
