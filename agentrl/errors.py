"""The one exception tree of agentrl, grouped by who is at fault.

    AgentRLError
    ├── ConfigError              the user's config or command line is wrong; the message says what to change
    │   └── NotFound             the viewer was asked for a run, step or episode the store does not hold (404)
    ├── EnvError                 an environment or its registry misbehaved
    │   ├── EnvNotFound          unknown env id (with "did you mean" suggestions)
    │   ├── EnvPluginError       an installed plugin failed to import or register
    │   └── ReplayDiverged       an episode's actions replayed from reset did not reach its recorded states
    ├── SandboxError             the sandbox layer failed (infrastructure, not the agent's fault)
    │   ├── SandboxUnavailable   Docker engine or image missing; run `make setup`
    │   ├── SandboxLost          a container died or vanished mid-episode
    │   ├── SandboxFileError     a file could not be written to or read from a sandbox
    │   └── StateKeyError        the workspace digest could not be computed
    ├── ServiceError             a request to the env service did not succeed
    │   ├── ServiceUnavailable   infrastructure: unreachable, lost connection, 5xx, 429 (re-played)
    │   │   ├── SessionLimitReached  the service is full (429 with Retry-After)
    │   │   └── StepTimedOut     a step ran over the service's step timeout (504)
    │   └── RequestRejected      the caller's mistake (4xx): retrying cannot help; the run stops
    │       ├── AuthError        401: missing or wrong token; set AGENTRL_SERVICE_TOKEN
    │       ├── SessionNotFound  404: the session id is unknown (expired or closed)
    │       ├── EpisodeOver      409: a step after the episode ended
    │       ├── ForkUnsupported  409: a fork of a session whose env cannot fork (`Env.fork_capability`)
    │       ├── InvalidTask      422: the env rejected the task record or seed at reset
    │       └── InvalidRequest   422: the request body is malformed
    ├── RolloutError             every episode of a step failed for infrastructure reasons, after re-plays
    ├── HarnessError             an external agent harness (`rollout.harness`) misbehaved
    │   ├── ChatError            the harness endpoint refuses a request (an OpenAI error; a ValueError)
    │   │   └── EpisodeClosed    a request after the harness's episode ended (409)
    │   └── HarnessFailed        a subprocess harness exited non-zero (a RuntimeError)
    ├── PolicyStopped            `agentrl demos`: the scripted policy has no further turn (demo dropped)
    ├── ModelError               a model could not be found, loaded or converted
    │   └── InvalidPrompt        a prompt the model cannot read: empty, or ids outside the vocabulary
    └── StoreError               the database could not be opened or written

What this is not: a place for expected episode failures. A malformed tool call, a timed-out command or a
wrong answer is data on the episode (`Turn.invalid`, `Episode.stop_reason`), never an exception.
Infrastructure errors (`INFRA_ERRORS`: `SandboxError`, `ServiceUnavailable`) end an episode with
`stop_reason="infra_error"` and the episode is re-played; a `RequestRejected` is never re-played and stops
the run with the service's message.

Two harness errors keep the builtin base they were first written with (`ChatError` is a ValueError,
`HarnessFailed` a RuntimeError), so code that catches those still does. The only exceptions defined
elsewhere (`tests/unit/test_errors.py`) are one private to a function's control flow that never leaves it
(the tool-call parser's `_Malformed`) and one a framework requires to be its own type (the service's
`BodyTooLarge`, a Starlette HTTPException).

Across the env service boundary an error keeps its class: the service sends its class name with the status
of `agentrl.wire.STATUS_OF_ERROR`, and `agentrl.client` raises that class again (a sandbox failure arrives
as `ServiceUnavailable`: the client has no sandbox).
"""

from __future__ import annotations


class AgentRLError(Exception):
    """Base of every error agentrl raises on purpose."""


class ConfigError(AgentRLError):
    """The config or command line is invalid."""


class NotFound(ConfigError):
    """A run, step or episode the viewer was asked for is not in the store."""


class EnvError(AgentRLError):
    """An environment or the env registry misbehaved."""


class EnvNotFound(EnvError):
    """No environment is registered under this id."""


class EnvPluginError(EnvError):
    """An installed env plugin failed to import or register."""


class ReplayDiverged(EnvError):
    """Replaying an episode's actions into a fresh session (reset with the same task and seed) did not give
    the step results the episode recorded: the env is not deterministic given its actions, so the state
    cannot be reached again this way (a tree rollout then keeps the branch as an infrastructure failure)."""


class SandboxError(AgentRLError):
    """The sandbox layer failed; an infrastructure failure, not the agent's fault."""


class SandboxUnavailable(SandboxError):
    """The Docker engine or a sandbox image is missing."""


class SandboxLost(SandboxError):
    """A sandbox container died or vanished while in use."""


class SandboxFileError(SandboxError):
    """A file could not be written to or read from a sandbox (missing path, full tmpfs, read-only root)."""


class StateKeyError(SandboxError):
    """The workspace digest could not be computed (the exec failed or printed no digest)."""


class ServiceError(AgentRLError):
    """A request to the env service did not succeed."""


class ServiceUnavailable(ServiceError):
    """The env service could not be reached, lost the connection, or answered 5xx or 429."""


class SessionLimitReached(ServiceUnavailable):
    """The service holds `max_sessions` live sessions; retry later or on another replica (HTTP 429)."""


class StepTimedOut(ServiceUnavailable):
    """An env step ran longer than `step_timeout_s`; its session is gone (HTTP 504)."""


class RequestRejected(ServiceError):
    """The service refused the request as the caller's mistake (4xx); the message says what to fix."""


class AuthError(RequestRejected):
    """The service wants a bearer token and got none or a wrong one (HTTP 401)."""


class SessionNotFound(RequestRejected):
    """The session id is unknown to the service (expired or closed; HTTP 404)."""


class EpisodeOver(RequestRejected):
    """A step was sent to a session whose episode already ended (HTTP 409)."""


class ForkUnsupported(RequestRejected):
    """The env cannot fork (its `fork_capability` is "none"); branch nothing, play independent episodes
    (HTTP 409)."""


class InvalidTask(RequestRejected):
    """The env rejected the task or seed at reset (HTTP 422)."""


class InvalidRequest(RequestRejected):
    """The request body is malformed (HTTP 422)."""


class RolloutError(AgentRLError):
    """Every episode of a training step or an evaluation failed for infrastructure reasons, re-plays
    included; training on nothing would hide it."""


class HarnessError(AgentRLError):
    """An external agent harness (`rollout.harness`) misbehaved."""


class ChatError(HarnessError, ValueError):
    """A request the harness endpoint refuses, with the OpenAI error fields it is answered with."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.kind = message, param, code, status, kind


class EpisodeClosed(ChatError):
    """The episode is over for the harness (finished, timed out); its later requests get this 409."""


class HarnessFailed(HarnessError, RuntimeError):
    """A subprocess harness exited non-zero."""


class PolicyStopped(AgentRLError):
    """The demonstrating policy has no further turn (its generator returned)."""


class ModelError(AgentRLError):
    """A model could not be found, loaded or converted."""


class InvalidPrompt(ModelError):
    """A prompt the model cannot read: empty, or holding ids outside the vocabulary."""


class StoreError(AgentRLError):
    """The run store could not be opened or written."""


INFRA_ERRORS: tuple[type[AgentRLError], ...] = (SandboxError, ServiceUnavailable)
"""Errors that end an episode as an infrastructure failure (re-played) instead of stopping the run."""
