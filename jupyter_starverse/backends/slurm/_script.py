"""The sbatch script of a job: one pure function from its inputs to readable, commented text.

Nothing here runs a program or touches the file system. Every value that came from the
user is quoted with :func:`shlex.quote`; ``bash -n`` accepts every script this renders.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_starverse._version import __version__
from jupyter_starverse.backends._restarts import PREEMPT_RESTARTS
from jupyter_starverse.errors import BadInputError
from jupyter_starverse.jobmodel import JobSpec

__all__ = ["JOB_ID_TOKEN", "RANK_MODULE", "TERM_BEFORE_LIMIT_S", "SlurmLaunch", "render_script"]

RANK_MODULE = "jupyter_starverse.backends.slurm._rank"
REQUEUE_MODULE = "jupyter_starverse.backends.slurm._requeue"

#: seconds before the time limit at which the batch shell gets SIGTERM (checkpoint, then requeue)
TERM_BEFORE_LIMIT_S = 120
#: the job id of a printed script (``-o sbatch``): the script names its run folder after Slurm's id
JOB_ID_TOKEN = "<job-id>"  # noqa: S105 - a placeholder, not a secret
_PLAIN = re.compile(r"[A-Za-z0-9_./:@%+,=<>-]+")


@dataclass(frozen=True)
class SlurmLaunch:
    """Everything the script says, resolved: no lookup happens while rendering."""

    job_id: str
    spec: JobSpec
    run_dir: str
    python: str
    entry: tuple[str, ...]  # what each rank's task runs: ``-m RANK_MODULE script args`` or ``... --exec cmd``
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: Mapping[str, str] = field(default_factory=dict)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    gpu_flag: str = "gpus-per-node"
    resume_from: str | None = None
    preempt_restarts: int = PREEMPT_RESTARTS  # requeues after preemptions; failures: spec.max_restarts
    cpus: int | None = None  # CPUs of a node for all its ranks (--cpus-per-task: this / procs_per_node)
    memory: str | None = None  # --mem per node
    resources_note: str = ""
    signal_margin: int = TERM_BEFORE_LIMIT_S  # --signal=B:TERM@margin
    billing_note: str = ""  # why the partition / QOS is what it is (spot)
    standalone: bool = False  # printed for `sbatch FILE`: the script makes its own run folder
    files: Mapping[str, str] = field(default_factory=dict)  # run-folder files a standalone script writes

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "run_dir": self.run_dir,
            "python": self.python,
            "entry": list(self.entry),
            "env": dict(self.env),
            "mounts": dict(self.mounts),
            "partition": self.partition,
            "account": self.account,
            "qos": self.qos,
            "time_limit": self.time_limit,
            "gpu_flag": self.gpu_flag,
            "resume_from": self.resume_from,
            "preempt_restarts": self.preempt_restarts,
            "cpus": self.cpus,
            "memory": self.memory,
            "signal_margin": self.signal_margin,
            "standalone": self.standalone,
        }


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _directive(flag: str, value: object | None, comment: str = "") -> list[str]:
    if value is None:
        return []
    # sbatch reads #SBATCH lines itself (no shell quoting): only plain words are safe there
    text = str(value)
    if not _PLAIN.fullmatch(text):
        raise BadInputError(
            f"#SBATCH --{flag}: {text!r} has spaces, quotes or other characters sbatch cannot take",
            field=flag,
            hint="use letters, digits and . _ - / : @ % + , = (an experiments folder without spaces)",
        )
    line = f"#SBATCH --{flag}={text}"
    return [f"{line:<44} # {comment}" if comment else line]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def render_script(launch: SlurmLaunch) -> str:
    """The sbatch script of ``launch``."""
    spec, run = launch.spec, launch.run_dir
    logs = f"{run}/logs"
    device = f"{spec.accelerator} GPUs, nccl" if spec.is_gpu else "CPU, gloo"
    lines = [
        "#!/bin/bash",
        f"# Slurm batch script of the starverse job {launch.job_id} (jupyter_starverse {__version__}).",
        f"# Job {spec.name!r}, experiment {spec.experiment_name!r}: {spec.nodes} node(s) x "
        f"{spec.procs_per_node} process(es) = world size {spec.world_size} ({device}), template {spec.template}.",
        "# One Slurm task per rank (srun), static rendezvous on the first node (rank 0 hosts the store);",
        "# every rank runs the script under jupyter_starverse's worker (logs/rankN.log, pids/, errors/).",
        f"# Run folder (must be on a file system every node sees): {_one_line(run)}",
        "# Preemption, a lost node, or the time limit: SIGTERM -> every rank checkpoints -> the job",
        f"# is requeued and resumes from its latest checkpoint ({launch.preempt_restarts} time(s) at most); a failure",
        f"# of the script is requeued {spec.max_restarts} time(s) (max_restarts). `starverse jobs cancel` is final.",
        "#",
    ]
    partition_note = f"partition of {spec.accelerator} (STARVERSE_SLURM_PARTITIONS)" if launch.partition else ""
    partition_note = launch.billing_note if launch.billing_note and launch.partition else partition_note
    lines += _directive("job-name", spec.name)
    if not launch.standalone:
        lines += _directive("comment", f"starverse:{launch.job_id}")
    lines += _directive("nodes", spec.nodes)
    lines += _directive("ntasks-per-node", spec.procs_per_node, "one task per rank")
    lines += _directive("partition", launch.partition, partition_note)
    if spec.is_gpu:
        if launch.gpu_flag == "gres":
            lines += _directive("gres", f"gpu:{spec.procs_per_node}", "one GPU per process")
        else:
            lines += _directive("gpus-per-node", spec.procs_per_node, "one GPU per process")
    per_rank = -(-launch.cpus // spec.procs_per_node) if launch.cpus else None
    lines += _directive("cpus-per-task", per_rank, f"per rank, {launch.cpus} per node: {launch.resources_note}")
    lines += _directive("mem", _slurm_memory(launch.memory) if launch.memory else None, "memory per node")
    lines += _directive("time", launch.time_limit, "STARVERSE_SLURM_TIME")
    lines += _directive("account", launch.account, "STARVERSE_SLURM_ACCOUNT")
    qos_note = launch.billing_note if launch.billing_note and launch.qos else "STARVERSE_SLURM_QOS"
    lines += _directive("qos", launch.qos, qos_note)
    if launch.standalone:  # the run folder does not exist yet: Slurm's own %j names the first lines' file
        lines += _directive("output", "starverse-%x-%j.log", "until the script moves its output to the run folder")
    else:
        lines += _directive("chdir", run)
        lines += _directive("output", f"{logs}/batch.log", "this script's own output")
    lines += _directive("open-mode", "append", "a requeued run adds to the logs")
    lines += _directive("export", "ALL", "the submit environment (secrets by reference)")
    lines.append(f"{'#SBATCH --requeue':<44} # requeue on preemption or a lost node")
    lines += _directive("signal", f"B:TERM@{launch.signal_margin}", "SIGTERM before the time limit")
    lines += ["", "set -uo pipefail", ""]
    if launch.standalone:
        lines += _standalone(launch)

    lines += ["# -- environment of every rank (torchrun adds RANK, WORLD_SIZE, ...) --"]
    lines += [f"export {k}={_q(v)}" for k, v in sorted(launch.env.items()) if k != "PYTHONPATH"]
    lines.append("")
    lines += _activation(launch.env)
    if spec.secrets:
        lines += [
            "# -- secrets, by reference: starverse puts each into the environment of `sbatch` when it submits",
            "#    (--export=ALL); their values are never in this file",
        ]
        lines += [f"#    {name} <- {_one_line(str(spec.secrets[name]))}" for name in sorted(spec.secrets)]
        for name in sorted(spec.secrets):
            lines.append(f': "${{{name}:?secret {name} must be set in the environment that submits this job}}"')
        lines.append("")
    if launch.mounts:
        lines.append("# -- mounted catalog entries (shared file system paths of the store) --")
        for name, path in sorted(launch.mounts.items()):
            lines.append(f"#    {_one_line(name)}: {_one_line(path)}")
        paths = " ".join(_q(p) for _, p in sorted(launch.mounts.items()))
        lines += [
            f"for path in {paths}; do",
            '    [ -e "$path" ] || { echo "starverse: mount $path is missing on $(hostname)" >&2; exit 1; }',
            "done",
            "",
        ]
    lines += [
        "# -- rendezvous: rank 0, on the first node (this one), hosts the store on a free port. Static",
        "#    (RANK = SLURM_PROCID, set by `_rank`): a try never changes its nodes, a requeue is a new try",
        "#    with a new port, and the elastic c10d round would add ~1 s of polling before the first step --",
        f"PYTHON={_q(launch.python)}",
        "head=$(hostname)",
        "# a free port below the kernel's ephemeral range (32768+): no outgoing connection of this busy",
        "# node can take it in the seconds before rank 0 listens on it",
        'port=$("$PYTHON" -c \'',
        "import random, socket",
        "for p in random.sample(range(20000, 32768), 64):",
        "    s = socket.socket()",
        "    try:",
        '        s.bind(("", p))',
        "    except OSError:",
        "        continue",
        "    print(p)",
        "    break",
        "')",
        '[ -n "$port" ] || { echo "starverse: no free port for the rendezvous on $head" >&2; exit 1; }',
        "attempt=${SLURM_RESTART_COUNT:-0}",
        "try=$(( attempt + 1 ))",
        "started=$(date +%s)",
        "export STARVERSE_ATTEMPT=$attempt",
        'export MASTER_ADDR="$head" MASTER_PORT="$port" TORCHELASTIC_RUN_ID="$SLURM_JOB_ID-$try"',
        f"export WORLD_SIZE={spec.world_size} LOCAL_WORLD_SIZE={spec.procs_per_node} GROUP_WORLD_SIZE={spec.nodes}",
        'echo "starverse: Slurm job $SLURM_JOB_ID, try $try, nodes $SLURM_JOB_NODELIST, rendezvous $head:$port"',
        "# a requeue slurmctld made on its own (a lost node) spends the preemption budget too; a first",
        "# try has none to count, so its record is written beside the start, not before it",
        'began=""',
        'if [ "$attempt" -eq 0 ]; then',
        f'    "$PYTHON" -m {REQUEUE_MODULE} begin {_q(run)} 0 {launch.preempt_restarts} & began=$!',
        "else",
        f'    "$PYTHON" -m {REQUEUE_MODULE} begin {_q(run)} "$attempt" {launch.preempt_restarts} || exit 1',
        "fi",
        "",
        "# -- one task per rank, no agent between Slurm and the ranks (as submitit does): `_rank` sets",
        "#    RANK/LOCAL_RANK/GROUP_RANK from SLURM_PROCID/LOCALID/NODEID; a Slurm signal reaches each rank",
        "#    once and every rank checkpoints (a collective save) before it stops. A node's ranks write",
        "#    logs/node<N>.log. --",
        f"srun --kill-on-bad-exit=1 --ntasks-per-node={spec.procs_per_node} \\",
        f"    --output={_q(logs + '/node%n.log')} --open-mode=append \\",
        '    "$PYTHON" ' + " ".join(_q(a) for a in launch.entry) + " &",
        "agents=$!",
        "",
        "# SIGTERM to this shell (time limit, preemption): pass it to the ranks (not to srun, which",
        "# would kill them at once) and let them checkpoint.",
        "stopping=0",
        "trap 'stopping=1; scancel --signal=TERM \"$SLURM_JOB_ID\"' TERM",
        'while :; do wait "$agents"; rc=$?; kill -0 "$agents" 2>/dev/null || break; done',
        '[ -z "$began" ] || wait "$began"',  # the first try's record is written before it is judged
        f'printf \'{{"slurm_job_id": "%s", "try": %d, "exit_code": %d, "time": %d}}\\n\' '
        f'"$SLURM_JOB_ID" "$try" "$rc" "$(date +%s)" > {_q(run + "/slurm-exit.json")}',
        "",
        "# The attempt ended: a preemption (a rank stopped on SIGTERM) or a failure is requeued while its",
        "# budget lasts (restarts.json says why); a success, a cancel or a spent budget is final.",
        f'if "$PYTHON" -m {REQUEUE_MODULE} end {_q(run)} "$attempt" "$rc" "$stopping" "$started" '
        f"{spec.max_restarts} {launch.preempt_restarts}; then",
        '    echo "starverse: requeueing to resume from the checkpoint"',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'exit "$rc"',
        "",
    ]
    if launch.standalone:
        return "\n".join(_name_run(line) for line in lines)
    return "\n".join(lines)


def _standalone(launch: SlurmLaunch) -> list[str]:
    """A printed script's first steps: its job id from Slurm's, its run folder made, its output moved there."""
    run = launch.run_dir
    out = [
        "# -- printed by `starverse launch -o sbatch`: submit it as it is (`sbatch FILE`). The run folder",
        "#    is named after Slurm's job id and made here; this script's output moves there. --",
        "#    A submitter that names the run itself: `sbatch --export=ALL,STARVERSE_SUBMIT_ID=ID FILE`.",
        f'STARVERSE_JOB_ID="${{STARVERSE_SUBMIT_ID:-{launch.spec.name}-slurm$SLURM_JOB_ID}}"',
        "unset STARVERSE_SUBMIT_ID  # not inherited by a job this one submits",
        f"run={_q(run)}",
        'mkdir -p "$run/logs" "$run/checkpoints" && cd "$run" || { echo "starverse: cannot make $run" >&2; exit 1; }',
        'exec >>"$run/logs/batch.log" 2>&1',
    ]
    for name, text in sorted(launch.files.items()):
        marker = "STARVERSE_EOF"
        while marker in text:
            marker += "_"
        out += [f"cat > {_q(run + '/' + name)} <<'{marker}'", *text.rstrip("\n").split("\n"), marker]
    return [*out, ""]


def _name_run(line: str) -> str:
    """A line of a printed script with its job id the script's own (``$STARVERSE_JOB_ID``)."""
    if JOB_ID_TOKEN not in line:
        return line
    if line.startswith("#"):
        return line.replace(JOB_ID_TOKEN, "$STARVERSE_JOB_ID")
    # every path that holds the id was quoted with shlex.quote ('...<job-id>...'): reopen the quotes
    return line.replace(JOB_ID_TOKEN, "'\"$STARVERSE_JOB_ID\"'")


def _activation(env: Mapping[str, str]) -> list[str]:
    """The step before srun: the job's environment and working folder must be on the shared store."""
    site, workdir = env.get("PYTHONPATH") if env.get("STARVERSE_ENV") else None, env.get("STARVERSE_WORKDIR")
    if site is None and workdir is None:
        return [f"export PYTHONPATH={_q(env['PYTHONPATH'])}", ""] if "PYTHONPATH" in env else []
    out = ["# -- the job's environment (`starverse env show ID`) and working folder, built once on the store --"]
    if site is not None:
        record = site.rsplit("/", 1)[0] + "/env.json"
        out += [
            f'[ -f {_q(record)} ] || {{ echo "starverse: environment {env["STARVERSE_ENV"][:12]} is missing on '
            '$(hostname); launch again (the launch builds it)" >&2; exit 1; }',
            f"export PYTHONPATH={_q(site)}${{PYTHONPATH:+:$PYTHONPATH}}  # layered over the Python of the job",
        ]
    if workdir is not None:
        out.append(
            f'[ -d {_q(workdir)} ] || {{ echo "starverse: working folder {_one_line(workdir)} is missing on '
            '$(hostname)" >&2; exit 1; }'
        )
    return [*out, ""]


def _slurm_memory(text: str) -> str:
    """``64Gi`` / ``512Mi`` / ``64G`` as sbatch's ``--mem`` (``64G``, ``512M``)."""
    value = str(text).strip()
    for suffix, unit in (("Ki", "K"), ("Mi", "M"), ("Gi", "G"), ("Ti", "T")):
        if value.endswith(suffix):
            return value[: -len(suffix)] + unit
    return value


def render_entry(argv: Sequence[str]) -> str:
    """An argv as one shell-quoted line (for comments and logs)."""
    return " ".join(_q(a) for a in argv)
