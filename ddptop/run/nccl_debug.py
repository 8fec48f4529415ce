"""The variables that make a launch's ranks write NCCL's TUNING log: which algorithm and protocol NCCL chose
for each collective, one line per collective rank 0 of a communicator enqueues (read back by
``ddptop.telemetry.nccl_log``).

``ddptop tune`` on GPUs sets them in every launch, with the log in files of their own in the launch's
``nccl/`` folder (``NCCL_DEBUG_FILE``) so the ranks' stdout stays readable. A user who set any NCCL_DEBUG
variable keeps theirs: then nothing is set and the choice is not read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ddptop.protocol import layout

USER_VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


def tuning_environment(launch_dir: str, environment: Mapping[str, str]) -> dict[str, str]:
    """The variables that make NCCL write its TUNING log into the launch's ``nccl/`` folder, or none where the
    user set NCCL's debug output themselves. The folder is made here: NCCL opens the file at init."""
    if any(variable in environment for variable in USER_VARIABLES):
        return {}
    folder = os.path.join(launch_dir, layout.NCCL_LOG_DIR)
    os.makedirs(folder, exist_ok=True)
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
            "NCCL_DEBUG_FILE": os.path.join(folder, "%h.%p.log")}  # NCCL expands %h (host) and %p (pid)
