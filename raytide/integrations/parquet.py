"""Outputs into Parquet files, one directory per epoch, each epoch committed once.

:func:`write_parquet` takes a job's output epoch by epoch, as ``job.results`` hands them
out, and :class:`ParquetSink` writes each to ``<root>/epoch=<E>/part-0.parquet``: first
under a temporary name starting with ``_`` (which Arrow and Spark readers skip), then
moved into place. The move is the commit, and it is idempotent: an epoch whose file
exists is not written again. So with ``rt.run(..., recovery=...)``, whose ``job.results``
hands out each epoch once across recoveries, and with a ``restore=`` that re-emits an
epoch a previous run had committed, every epoch is in the files exactly once. The
``epoch=E`` directories are Hive partitions: ``pyarrow.dataset.dataset(root,
partitioning="hive")`` and Spark read the epoch back as a column.

The commit is at epoch completion (deterministic dataflows: the default and only mode of
:mod:`raytide` recovery, see ``docs/recovery.md``). ``root`` is a local path or any URI
``pyarrow.fs`` understands (``s3://bucket/prefix``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from raytide.errors import ArgumentError
from raytide.integrations.records import records_to_table

if TYPE_CHECKING:
    from raytide.driver.job import Job

#: The name of an epoch's file inside its partition directory.
PART = "part-0.parquet"


class ParquetSink:
    """Epochs of records into ``root/epoch=E/part-0.parquet``, each committed by one move.

    Args:
        root: the directory (local path or ``pyarrow.fs`` URI).
        output: the output's name, for error messages.
        schema: the Arrow schema of the records (see
            :func:`~raytide.integrations.records.records_to_table`); inferred per epoch if None.
    """

    def __init__(self, root: str, output: str = "output", schema: pa.Schema | None = None) -> None:
        if not isinstance(root, str) or not root:
            raise ArgumentError(f"a Parquet sink needs a directory path or URI, not {root!r}")
        if "://" in root:
            self.filesystem, self.root = pafs.FileSystem.from_uri(root)
        else:
            self.filesystem, self.root = pafs.LocalFileSystem(), Path(root).absolute().as_posix()
        self.output, self.schema = output, schema

    def path(self, epoch: int) -> str:
        """Where epoch ``epoch`` is committed."""
        return f"{self.root}/epoch={epoch}/{PART}"

    def committed(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` is in place."""
        return self.filesystem.get_file_info(self.path(epoch)).type == pafs.FileType.File

    def write(self, epoch: int, records: Sequence[Any]) -> bool:
        """Write and commit ``records`` as epoch ``epoch``; False (and nothing written) if it
        was committed already."""
        if self.committed(epoch):
            return False
        table = records_to_table(records, vertex=self.output, epoch=epoch, schema=self.schema)
        directory = f"{self.root}/epoch={epoch}"
        self.filesystem.create_dir(directory, recursive=True)
        temporary = f"{directory}/_{uuid.uuid4().hex}.parquet"
        pq.write_table(table, temporary, filesystem=self.filesystem)
        self.filesystem.move(temporary, self.path(epoch))
        return True


def write_parquet(job: Job, output: str, root: str, *, schema: pa.Schema | None = None,
                  timeout: float = 600.0) -> list[int]:
    """Write every epoch of ``job``'s output ``output`` to Parquet under ``root`` as it completes,
    until the job finishes; returns the epochs this call committed (see the module docstring).

    Epochs are taken with ``job.results``, so they are released from the driver once written;
    an epoch that completed with no records writes nothing.
    """
    sink = ParquetSink(root, output, schema)
    return [epoch for epoch, records in job.results(output, timeout=timeout) if records and sink.write(epoch, records)]
