"""Container healthcheck of the env service: exit 0 when GET /healthz on the service's port answers 200.

Reads AGENTRL_SERVICE_PORT (the port the service listens on inside the container). /healthz needs no token.
"""

import os
import sys
import urllib.request

port = os.environ.get("AGENTRL_SERVICE_PORT", "8000")
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError:
    sys.exit(1)
