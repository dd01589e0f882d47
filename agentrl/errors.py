"""The one exception tree of agentrl, grouped by who is at fault.

    AgentRLError
    ├── ConfigError            the user's config or command line is wrong; the message says what to change
    ├── EnvError               an environment or its registry misbehaved
    │   ├── EnvNotFound        unknown env id (with "did you mean" suggestions)
    │   └── EnvPluginError     an installed plugin failed to import or register
    ├── SandboxError           the sandbox layer failed (infrastructure, not the agent's fault)
    │   ├── SandboxUnavailable Docker engine or image missing; run `make setup`
    │   ├── SandboxLost        a container died or vanished mid-episode
    │   └── SandboxFileError   a file could not be written to or read from a sandbox
    ├── ServiceError           the env service failed or refused a request
    │   ├── ServiceUnavailable the service could not be reached or returned 5xx
    │   └── SessionNotFound    the session id is unknown (expired or closed)
    ├── ModelError             a model could not be found, loaded or converted
    └── StoreError             the database could not be opened or written

What this is not: a place for expected episode failures. A malformed tool call, a timed-out command or a
wrong answer is data on the episode (`Turn.invalid`, `Episode.stop_reason`), never an exception.
Infrastructure errors (`SandboxError`, `ServiceError`) end an episode with `stop_reason="infra_error"`.
"""

from __future__ import annotations


class AgentRLError(Exception):
    """Base of every error agentrl raises on purpose."""


class ConfigError(AgentRLError):
    """The config or command line is invalid."""


class EnvError(AgentRLError):
    """An environment or the env registry misbehaved."""


class EnvNotFound(EnvError):
    """No environment is registered under this id."""


class EnvPluginError(EnvError):
    """An installed env plugin failed to import or register."""


class SandboxError(AgentRLError):
    """The sandbox layer failed; an infrastructure failure, not the agent's fault."""


class SandboxUnavailable(SandboxError):
    """The Docker engine or a sandbox image is missing."""


class SandboxLost(SandboxError):
    """A sandbox container died or vanished while in use."""


class SandboxFileError(SandboxError):
    """A file could not be written to or read from a sandbox (missing path, full tmpfs, read-only root)."""


class ServiceError(AgentRLError):
    """The env service failed or refused a request."""


class ServiceUnavailable(ServiceError):
    """The env service could not be reached or answered with a server error."""


class SessionNotFound(ServiceError):
    """The session id is unknown to the service (expired or closed)."""


class ModelError(AgentRLError):
    """A model could not be found, loaded or converted."""


class StoreError(AgentRLError):
    """The run store could not be opened or written."""


INFRA_ERRORS: tuple[type[AgentRLError], ...] = (SandboxError, ServiceError)
"""Errors that end an episode as an infrastructure failure instead of crashing the run."""
