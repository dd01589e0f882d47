"""Train any agent harness: an OpenAI-compatible endpoint per episode that records every call token-in/out.

An external harness (mini-swe-agent, a hand-written loop over the `openai` client, ...) plays an episode
against `/v1/chat/completions`, backed by the run's engine, and acts in the env session it is given. Every
call's prompt ids, sampled ids and sampler log-probs are recorded; the episode comes back as an ordinary
`agentrl.types.Episode`, so credit assignment, the store and the trainer take it as they take any other.

Modules (imported on use; this package's `__init__` imports nothing). Its config, `HarnessConfig`
(`rollout.harness.*`), lives in `agentrl/agent/rollout_config.py` beside `RolloutConfig`, so a run config
holds it without loading FastAPI and `agent/` never imports this package.
- `chat`: OpenAI messages <-> token ids (the chat template and agentrl's tool-call format), pure.
- `recorder`: one episode's calls and env steps; segments; the `Episode` they make.
- `endpoint`: the FastAPI app and its uvicorn server on 127.0.0.1 (`ChatEndpoint`), keys, limits, errors.
- `runner`: `HarnessPlayer` (the `EpisodePlayer` the trainer picks with `choose_player` when a harness is
  configured) and `run_harness_episode`, the `HarnessContext` a harness gets, callable and subprocess
  harnesses.
- `minisweagent`: the adapter that runs mini-swe-agent's `DefaultAgent` in an agentrl env session.

The guide is docs/harness.md.
"""
