"""The board of a Ray cluster's watched jobs: a named, detached actor (``raytide-ui-board`` in
namespace ``raytide``) where each job whose driver watches it (``rt.run(..., ui=True)``, or
``RAYTIDE_UI=1`` in the driver's environment) posts its live view's document about once a
second, and where ``python -m raytide ui`` reads them. It holds the latest document per job
only, and forgets a job not heard from for :data:`FORGET_S` seconds.
"""

from __future__ import annotations

import time
from typing import Any

import ray

NAME, NAMESPACE = "raytide-ui-board", "raytide"
#: A job not heard from for this long (its driver ended) is dropped from the board.
FORGET_S = 600.0
#: After this long without a post, a job's document says ``silent`` (its driver is gone or stuck).
SILENT_S = 10.0


class UIBoard:
    """The latest document of each watched job."""

    def __init__(self) -> None:
        self.documents: dict[str, tuple[float, dict[str, Any]]] = {}

    def post(self, job: str, document: dict[str, Any]) -> None:
        """Job ``job``'s driver's latest document."""
        self.documents[job] = (time.time(), document)

    def read(self) -> dict[str, dict[str, Any]]:
        """Every job's latest document; one not posted to lately is marked ``silent``."""
        now = time.time()
        self.documents = {job: entry for job, entry in self.documents.items() if now - entry[0] < FORGET_S}
        return {job: ({**document, "state": f"silent for {now - at:.0f} s ({document.get('state')})"}
                      if now - at > SILENT_S and document.get("state") == "running" else document)
                for job, (at, document) in self.documents.items()}


def board(create: bool) -> Any:
    """The cluster's board (created, if ``create``, detached and without a CPU); None if there is none."""
    if create:
        return ray.remote(UIBoard).options(name=NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                                           num_cpus=0, max_restarts=-1).remote()
    try:
        return ray.get_actor(NAME, namespace=NAMESPACE)
    except ValueError:
        return None
