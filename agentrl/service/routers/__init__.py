"""One router per resource: envs, sessions, health. Handlers are a few lines each."""
