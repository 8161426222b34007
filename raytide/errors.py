"""Typed errors raised by raytide; each names the place (vertex, replica, epoch) it concerns."""

from __future__ import annotations


class RaytideError(Exception):
    """Base class of every error raytide raises on purpose."""


class GraphError(RaytideError):
    """The dataflow graph is malformed (a cycle outside a loop, an unknown name, ...)."""


class ProgressError(RaytideError):
    """A progress-tracking invariant was violated (for example a send into the past)."""


class SnapshotError(RaytideError):
    """A snapshot could not be taken, committed or restored."""


class RescaleError(RaytideError):
    """A rescale request is invalid or could not be carried out."""


class SparkIntegrationError(RaytideError):
    """Data could not be moved between Spark and the dataflow (for example an unsupported column type)."""
