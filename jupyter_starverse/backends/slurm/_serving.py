"""An endpoint as a Slurm batch script: one pure function, readable text, every value quoted.

One task on one node runs the project's OpenAI-compatible server (``transformers`` /
``onnxruntime``) or vLLM's (``vllm``, GPUs) on port 8000 of its node; the script writes
``endpoint.json`` (node, port, URL) to the run folder so a client finds it. The token is read at
run time from a 0600 file on the shared volume into ``$SERVE_TOKEN`` (vLLM: ``$VLLM_API_KEY``):
the script names the file, never the value. ``bash -n`` accepts every script this renders.
"""

from __future__ import annotations

import shlex

from jupyter_starverse._version import __version__
from jupyter_starverse.backends._serving import serve_argv
from jupyter_starverse.jobmodel import EndpointSpec

from ._script import _directive

__all__ = ["render_endpoint_script"]


def render_endpoint_script(spec: EndpointSpec, *, python: str, run_dir: str, partition: str | None = None) -> str:
    """The sbatch script that serves ``spec``."""
    q = shlex.quote
    token_file = spec.token_file or f"{run_dir}/token"
    key_var = "VLLM_API_KEY" if spec.engine == "vllm" else "SERVE_TOKEN"
    lines = [
        "#!/bin/bash",
        f"# Slurm batch script of the starverse endpoint {spec.name} (jupyter_starverse {__version__}).",
        f"# Serves {spec.model} with {spec.engine} as an OpenAI-compatible API on port {spec.port} of its node;",
        "# the node and URL go to endpoint.json in the run folder. Stop it with scancel.",
        "#",
        *_directive("job-name", spec.name),
        *_directive("nodes", 1),
        *_directive("ntasks", 1),
        *_directive("partition", partition, "partition of the accelerator (STARVERSE_SLURM_PARTITIONS)"),
        *_directive("gres", f"gpu:{spec.gpus}" if spec.is_gpu else None, f"{spec.accelerator} GPUs"),
        *_directive("output", f"{run_dir}/logs/server.log"),
        "",
        "set -euo pipefail",
        f"mkdir -p {q(run_dir + '/logs')}",
        f"token_file={q(token_file)}",
        'if [ ! -s "$token_file" ]; then',
        '  echo "starverse: no token in $token_file: write one (chmod 600) before sbatch" >&2',
        "  exit 2",
        "fi",
        f'{key_var}="$(cat "$token_file")"',
        f"export {key_var}",
        "export HF_HUB_OFFLINE=1",
        'node="$(hostname -f)"',
        f'printf \'{{"host": "%s", "port": {spec.port}, "url": "http://%s:{spec.port}/v1", "job": "%s"}}\\n\' '
        f'"$node" "$node" "${{SLURM_JOB_ID:-}}" > {q(run_dir + "/endpoint.json")}',
        "exec srun --ntasks=1 " + " ".join(q(a) for a in serve_argv(spec, python)),
        "",
    ]
    return "\n".join(lines)
