"""Running a dataflow in this process, without Ray, under a seeded scheduler: the same cores
as on Ray, every interleaving Ray allows reproducible by its seed, with injected crashes,
recovery and rescales (FoundationDB's simulation testing; like ``trio.testing``)."""

from raytide.testing.local import LocalJob as LocalJob
from raytide.testing.outcome import LocalRecovery as LocalRecovery
from raytide.testing.outcome import LocalRun as LocalRun

__all__ = ["LocalJob", "LocalRecovery", "LocalRun"]
