"""What ``srun`` starts for each rank of a Slurm job: the rank's distributed environment from
Slurm's task variables, then the worker.

``python -m jupyter_starverse.backends.slurm._rank SCRIPT ARGS`` runs the script under the
project's worker (logs/rankN.log, pids/, errors/), as the local backend does;
``... _rank --exec COMMAND ARGS`` execs a command job.

No torchrun agent runs beside the ranks (as with submitit): ``srun`` starts one task per rank and
each sets what torchrun would have set, from Slurm's own variables: ``RANK`` = ``SLURM_PROCID``,
``LOCAL_RANK`` = ``SLURM_LOCALID``, ``GROUP_RANK`` (and ``STARVERSE_NODE_INDEX``) =
``SLURM_NODEID``; the batch script exports ``MASTER_ADDR``/``MASTER_PORT`` (the first node, a free
port: rank 0 hosts the store, a static rendezvous), ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and
``GROUP_WORLD_SIZE``. The agent's Python start (it imports torch) is gone from the time before the
first step. Slurm's SIGTERM (``scancel --signal=TERM``, preemption, the time limit forwarded by the
batch script) reaches each rank once, straight from ``slurmstepd``: it checkpoints and exits 143.
"""

from __future__ import annotations

import os
import signal
import sys

#: Slurm's task variable -> what torchrun would set for the rank
_FROM_SLURM = (
    ("SLURM_PROCID", "RANK"),
    ("SLURM_PROCID", "ROLE_RANK"),
    ("SLURM_LOCALID", "LOCAL_RANK"),
    ("SLURM_NODEID", "GROUP_RANK"),
    ("SLURM_NODEID", "STARVERSE_NODE_INDEX"),
)


def rank_env(env: dict[str, str]) -> dict[str, str]:
    """The variables torchrun gives a rank, from a Slurm task's environment ``env``."""
    out = {name: env[slurm] for slurm, name in _FROM_SLURM if slurm in env}
    if "WORLD_SIZE" in env:
        out["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"]
    out.update(ROLE_NAME="default", TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0")
    if "OMP_NUM_THREADS" not in env and int(env.get("LOCAL_WORLD_SIZE") or 1) > 1:
        out["OMP_NUM_THREADS"] = "1"  # as torchrun sets it for more than one rank per node
    return out


def main(argv: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.environ.update(rank_env(dict(os.environ)))
    if argv[:1] == ["--exec"]:
        if len(argv) < 2:
            print("usage: python -m jupyter_starverse.backends.slurm._rank --exec COMMAND [ARGS...]", file=sys.stderr)
            return 2
        os.execvp(argv[1], argv[1:])  # noqa: S606 - the job's own command, no shell
    from jupyter_starverse.backends._worker import main as worker_main

    return worker_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
