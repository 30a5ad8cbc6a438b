"""The mode a workspace or a job runs in: CPU, or a GPU type and count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_starverse._settings import MODES
from jupyter_starverse.errors import BadInputError

__all__ = ["Mode"]


@dataclass(frozen=True)
class Mode:
    """``gpu`` (with a GPU type and count) or ``cpu``."""

    kind: str
    gpu_type: str | None = None
    gpus: int = 0

    def __post_init__(self) -> None:
        if self.kind not in MODES:
            raise BadInputError(f"mode {self.kind!r} is not one of {', '.join(MODES)}", field="mode")
        if self.kind == "cpu" and (self.gpu_type or self.gpus):
            object.__setattr__(self, "gpu_type", None)
            object.__setattr__(self, "gpus", 0)
        if self.kind == "gpu":
            if not self.gpu_type:
                raise BadInputError("gpu mode needs a GPU type", field="gpu_type", hint="for example --gpu a100-80g")
            if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
                raise BadInputError(f"gpu mode needs at least one GPU, got {self.gpus!r}", field="gpus")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "gpu_type": self.gpu_type, "gpus": self.gpus}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Mode:
        try:
            gpus = int(data.get("gpus") or 0)
        except (TypeError, ValueError):
            raise BadInputError(f"gpus must be a whole number, got {data.get('gpus')!r}", field="gpus") from None
        gpu_type = data.get("gpu_type")
        kind = str(data.get("kind", "")).lower()
        return cls(kind=kind, gpu_type=str(gpu_type).lower() if gpu_type else None, gpus=gpus)

    @property
    def accelerator(self) -> str:
        """``cpu`` or the GPU type: the key of the price and pool tables."""
        return self.gpu_type if self.kind == "gpu" and self.gpu_type else "cpu"

    def __str__(self) -> str:
        return f"gpu ({self.gpus} x {self.gpu_type})" if self.kind == "gpu" else "cpu"
