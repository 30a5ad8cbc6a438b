"""Serving: OpenAI-compatible endpoints of store models (``client.serve``).

``ServeService`` starts an endpoint of a model on this host as a detached process with a run
folder of its own (the process service, :class:`Processes`), lists and stops them, names each
model's lineage (store version, export report, training run), and renders the same endpoint
for Kubernetes (Deployment + Service) and Slurm (a batch script) through the backends.
"""

from __future__ import annotations

from ._process import Processes, ProcessFolder
from ._service import Endpoint, EndpointList, ServeLineage, ServeService, lineage_of

__all__ = ["Endpoint", "EndpointList", "ProcessFolder", "Processes", "ServeLineage", "ServeService", "lineage_of"]
