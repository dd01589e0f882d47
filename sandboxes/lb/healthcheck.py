"""Container healthcheck of the load balancer: exit 0 when HAProxy's monitor URI answers 200.

Reads AGENTRL_LB_BIND (":8700" or "127.0.0.1:8700"); an empty host means loopback inside the container.
"""

import os
import sys
import urllib.request

host, _, port = os.environ.get("AGENTRL_LB_BIND", ":8700").rpartition(":")
try:
    with urllib.request.urlopen(f"http://{host or '127.0.0.1'}:{port}/lb/healthz", timeout=2) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError:
    sys.exit(1)
