"""The env service: FastAPI app serving env sessions over HTTP (see docs/design.md, "The HTTP contract").

What this is: `create_app(settings)` and `ServiceSettings`; run it with `python -m agentrl.service`, or
in-process-but-separate with `EmbeddedService`. What this is not: a store of training data, or a client
(that is `agentrl/client.py`).
"""

from agentrl.service.app import create_app
from agentrl.service.settings import ServiceSettings

__all__ = ["ServiceSettings", "create_app"]
