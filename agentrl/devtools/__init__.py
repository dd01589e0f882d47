"""Tools for env authors: `agentrl envs new` (`scaffold`, rendering `templates/`) and `agentrl envs check`
(`service_check`).

What this is: the tooling that used to sit inside `agentrl/env/`. The line drawn: `agentrl.env` is what an
env and the runtime are written against (the `Env` base class, the registry, state keys, the text of a tool
call, the scripted-policy contract, plugin data lookup, and `check_env`, whose pure contract checks every
plugin's own tests call); a module moves here when it is run by a person writing an env rather than by an env
or a run, or when it needs layers above the env (the service, the client, the runner's parser).
`service_check` starts the env service and plays through `EnvClient`; `scaffold` writes files and runs a
subprocess. Neither is imported by `agentrl.env` or by training.

What this is not: the Env API (`agentrl.env`), or the CLI (`agentrl/cli/envs.py` is a thin layer over this).
"""
