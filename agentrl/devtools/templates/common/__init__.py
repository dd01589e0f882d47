"""Templates of `agentrl envs new` (see `agentrl.devtools.templates`); not imported."""
