"""`ray start ARGS...` that waits longer for its raylet to register (ray-cluster.sh runs its nodes so).

`ray start` gives a new raylet 30 s (hard-coded in ray/_private/node.py)
to show up in the GCS, and the raylet registers only once its dashboard
agent, a Python process, is up. On this 2-core machine under a test
suite's load (load average 20-30) the agent's imports alone took 16-25 s,
and nodes failed to start (three tries in a row). Here Ray's node lookup,
which that loop calls, itself waits up to REGISTER_S for the node, so the
loop's first call succeeds once the raylet registers. Usage:
python scripts/ray_node.py start --block ... (the arguments of `ray start`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

REGISTER_S = float(os.environ.get("SANDGYM_RAY_REGISTER_S", "240"))


def main() -> int:
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    lookup = services.get_node

    def patient_get_node(gcs_address: str, node_id: str) -> Any:
        deadline = time.monotonic() + REGISTER_S
        while True:
            try:
                return lookup(gcs_address, node_id)
            except RuntimeError:  # not registered yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    services.get_node = patient_get_node
    sys.argv = ["ray", *sys.argv[1:]]
    ray_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
