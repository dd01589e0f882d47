"""Entry point of `python -m agentrl.service`; see `agentrl.service.server`."""

from agentrl.service.server import main

raise SystemExit(main())
