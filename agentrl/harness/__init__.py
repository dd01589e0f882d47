"""Train any agent harness: an OpenAI-compatible endpoint per episode that records every call token-in/out.

An external harness (mini-swe-agent, a hand-written loop over the `openai` client, ...) plays an episode
against `/v1/chat/completions`, backed by the run's engine, and acts in the env session it is given. Every
call's prompt ids, sampled ids and sampler log-probs are recorded; the episode comes back as an ordinary
`agentrl.types.Episode`, so credit assignment, the store and the trainer take it as they take any other.

Modules (imported on use; this package's `__init__` imports nothing, so `RolloutConfig` can hold a
`HarnessConfig` without loading FastAPI):
- `config`: `HarnessConfig` (`rollout.harness.*`).
- `chat`: OpenAI messages <-> token ids (the chat template and agentrl's tool-call format), pure.
- `recorder`: one episode's calls and env steps; segments; the `Episode` they make.
- `endpoint`: the FastAPI app and its uvicorn server on 127.0.0.1 (`ChatEndpoint`), keys, limits, errors.
- `runner`: `run_harness_episode` (what `rollout.play_member` calls when a harness is configured), the
  `HarnessContext` a harness gets, callable and subprocess harnesses.
- `minisweagent`: the adapter that runs mini-swe-agent's `DefaultAgent` in an agentrl env session.

The guide is docs/harness.md.
"""
