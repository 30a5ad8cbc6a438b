"""What ``srun`` starts on each node: ``python -m jupyter_starverse.backends.slurm._node TORCHRUN...``.

Slurm delivers a signal to *every* process of a step (``scancel --signal=TERM``, preemption,
the time-limit signal forwarded by the batch script). The torchrun agent would pass that
SIGTERM on to its workers, so each rank would get it twice, and the runtime takes a second
SIGTERM as "exit now" (no checkpoint). So the agent runs with SIGTERM blocked: each rank gets
Slurm's one SIGTERM (``_rank`` unblocks it), checkpoints and exits, and the agent ends with
them. The agent still dies by SIGKILL when Slurm ends the step.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m jupyter_starverse.backends.slurm._node COMMAND [ARGS...]", file=sys.stderr)
        return 2
    node = os.environ.get("SLURM_NODEID", "0")
    os.environ["STARVERSE_NODE_INDEX"] = node
    os.environ["PET_NODE_RANK"] = node  # torchrun's --node-rank of the static rendezvous
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    sys.stdout.flush()
    os.execvp(argv[0], argv)  # noqa: S606 - argv from the script we rendered, no shell
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
