"""agentrl-env-calc: arithmetic a small model cannot do in its head but can with a Python tool.

Importing this package registers `agentrl/Calc-v0` (the `agentrl.envs` entry point names this module).
Task data: `agentrl_calc.tasks` (generation) and `tasks/calc/*.jsonl`; interaction: `agentrl_calc.env`.
"""

from agentrl.env import register

register(id="agentrl/Calc-v0", entry_point="agentrl_calc.env:CalcEnv")
