"""One router per resource: envs, sessions, health, metrics. Handlers are a few lines each."""
