"""agentrl-env-envname: ENVNAME_GAME

Importing this package registers `envname/Envname-v0` (the `agentrl.envs` entry point names this module).
The game: `agentrl_envname.env`; its tasks: `agentrl_envname.make_tasks`;
a scripted policy: `agentrl_envname.policy`. What the package ships besides code, found by agentrl by
name: `data/configs/envname.yaml` (the default run config) and `data/tasks/envname/` (the task suite).
"""

from agentrl.env import register

register(id="envname/Envname-v0", entry_point="agentrl_envname.env:EnvnameEnv")
