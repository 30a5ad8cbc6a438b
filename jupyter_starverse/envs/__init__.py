"""Job environments: the packages and the working folder of the notebook reach every rank.

``JobEnvs(settings)`` (``Starverse.envs``) captures what a job needs beyond its image
(``--env-from notebook|image|FILE``), builds it once on the store by lock hash, and packs the
working folder by content hash. Backends receive only ``JobSpec.env_id`` / ``workdir_id`` and
render them their own way (:func:`activation`).
"""

from __future__ import annotations

from ._build import BuildResult, EnvRecord, make_wheel
from ._capture import Dist, Lock, capture_notebook, diff, norm
from ._layout import EnvPaths
from ._service import EnvList, EnvPlan, JobEnvs
from ._workdir import WORKDIR_LIMIT, Workdir, pack_workdir

__all__ = [
    "WORKDIR_LIMIT",
    "BuildResult",
    "Dist",
    "EnvList",
    "EnvPaths",
    "EnvPlan",
    "EnvRecord",
    "JobEnvs",
    "Lock",
    "Workdir",
    "activation",
    "capture_notebook",
    "diff",
    "make_wheel",
    "norm",
    "pack_workdir",
]


def activation(store: str, env_id: str | None, workdir_id: str | None) -> dict[str, str]:
    """The variables that activate an environment and a working folder on the store (every backend)."""
    paths = EnvPaths(store) if (env_id or workdir_id) else None
    out: dict[str, str] = {}
    if paths is not None and env_id:
        out["STARVERSE_ENV"] = env_id
        out["PYTHONPATH"] = str(paths.site(env_id))
    if paths is not None and workdir_id:
        out["STARVERSE_WORKDIR"] = str(paths.workdir_tree(workdir_id))
    return out
