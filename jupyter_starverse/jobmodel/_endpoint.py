"""What a served model is, whatever runs it: the input of every backend's endpoint rendering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ENGINES", "SERVE_PORT", "EndpointSpec"]

#: Engines an endpoint may run: ``transformers`` (any causal LM, CPU or GPU), ``onnxruntime`` (an
#: exported graph, CPU), ``vllm`` (GPUs only; rendered for the cluster backends).
ENGINES = ("transformers", "onnxruntime", "vllm")
#: The container / node port an endpoint listens on in a cluster.
SERVE_PORT = 8000


@dataclass(frozen=True)
class EndpointSpec:
    """One OpenAI-compatible endpoint of a store model.

    ``model`` is the store name (``hf:ORG/REPO@REV``) and ``model_path`` where it is mounted (the
    same path in the notebook and in every pod); ``token_secret`` names a Kubernetes Secret
    (``NAME/KEY``) or, for Slurm, a file on the shared volume: a token value never appears in a
    manifest or a script.
    """

    name: str
    model: str
    model_path: str
    engine: str = "transformers"
    accelerator: str = "cpu"
    gpus: int = 1
    replicas: int = 1
    port: int = SERVE_PORT
    token_secret: str = "starverse-serve/token"  # noqa: S105 - a Secret's name and key, not a value
    token_file: str | None = None
    image: str | None = None
    cpu: str | None = None
    memory: str | None = None
    max_tokens: int = 512
    served_name: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.accelerator != "cpu"

    @property
    def model_name(self) -> str:
        """The name clients pass as ``model``."""
        return self.served_name or self.model

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "model_path": self.model_path,
            "engine": self.engine,
            "accelerator": self.accelerator,
            "gpus": self.gpus,
            "replicas": self.replicas,
            "port": self.port,
            "token_secret": self.token_secret,
            "token_file": self.token_file,
            "image": self.image,
            "cpu": self.cpu,
            "memory": self.memory,
            "max_tokens": self.max_tokens,
            "served_name": self.model_name,
        }
