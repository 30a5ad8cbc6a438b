"""What every backend's endpoint runs: the server's command line (ours or vLLM's)."""

from __future__ import annotations

from collections.abc import Sequence

from jupyter_starverse.jobmodel import EndpointSpec

__all__ = ["TOKEN_ENV", "serve_argv"]

#: The variable the project's server reads its bearer token from in a pod or a batch job.
TOKEN_ENV = "SERVE_TOKEN"  # noqa: S105 - a variable name, not a value


def serve_argv(spec: EndpointSpec, python: str, *, head: Sequence[str] | None = None) -> list[str]:
    """The server's command line in a pod or a batch job (the token comes from ``$SERVE_TOKEN``);
    ``head`` runs our module (default ``python -m``; pods: the image check first)."""
    if spec.engine == "vllm":
        return [
            python, "-m", "vllm.entrypoints.openai.api_server", "--model", spec.model_path,
            "--served-model-name", spec.model_name, "--host", "0.0.0.0", "--port", str(spec.port),  # noqa: S104
            "--tensor-parallel-size", str(spec.gpus), "--max-model-len", "4096",
        ]  # fmt: skip
    head = list(head) if head is not None else [python, "-m"]
    return [
        *head, "jupyter_starverse.serve._server", "--model-path", spec.model_path, "--name", spec.model_name,
        "--engine", spec.engine, "--host", "0.0.0.0", "--port", str(spec.port),  # noqa: S104 - a pod's port
        "--token-env", TOKEN_ENV, "--max-tokens", str(spec.max_tokens),
    ]  # fmt: skip
