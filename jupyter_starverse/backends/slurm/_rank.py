"""What torchrun starts for each rank of a Slurm job: SIGTERM unblocked again, then the worker.

``python -m jupyter_starverse.backends.slurm._rank SCRIPT ARGS`` runs the script under the
project's worker (logs/rankN.log, pids/, errors/), as the local backend does;
``... _rank --exec COMMAND ARGS`` execs a command job. See ``_node`` for why the signal mask.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if argv[:1] == ["--exec"]:
        if len(argv) < 2:
            print("usage: python -m jupyter_starverse.backends.slurm._rank --exec COMMAND [ARGS...]", file=sys.stderr)
            return 2
        os.execvp(argv[1], argv[1:])  # noqa: S606 - the job's own command, no shell
    from jupyter_starverse.backends._worker import main as worker_main

    return worker_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
