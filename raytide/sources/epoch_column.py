"""Epochs taken from an integer column: the one check that such a column is fit, for every source.

Arrow datasets, Ray Datasets and Spark DataFrames can give each row's epoch in a column.
Whichever source it is, the column must exist, hold integers, and hold no nulls and no
negative values; the sources then read their epochs in increasing order, so epochs never
decrease. Every failed check raises :class:`~raytide.errors.EpochColumnError` (for a
Spark DataFrame its subclass that is also a Spark integration error) with one message
shape: ``"<source>: epoch column '<name>' <what is wrong>; epochs must be non-negative integers"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from raytide.errors import EpochColumnError


@dataclass(frozen=True)
class EpochColumn:
    """The column ``name`` of the rows of ``source``, holding each row's epoch.

    Attributes:
        name: the column.
        source: what the rows come from, as error messages name it ("Arrow dataset
            ['a.parquet']", "Ray Dataset", "Spark DataFrame").
        error: the error raised when a check fails.
    """

    name: str
    source: str
    error: type[EpochColumnError] = EpochColumnError

    def unfit(self, problem: str) -> EpochColumnError:
        """The error saying what is wrong with the column."""
        return self.error(f"{self.source}: epoch column {self.name!r} {problem}; epochs must be non-negative integers")

    def check_present(self, columns: Sequence[str]) -> None:
        """Raise unless the column is one of ``columns``."""
        if self.name not in columns:
            raise self.unfit(f"is not a column (columns: {list(columns)})")

    def check_type(self, type_name: str, is_integer: bool) -> None:
        """Raise unless the column's type (named ``type_name`` in the source's own terms) is an integer type."""
        if not is_integer:
            raise self.unfit(f"has type {type_name}")

    def check_values(self, nulls: int, smallest: int | None) -> None:
        """Raise if the column has ``nulls`` > 0 null values or its ``smallest`` value is negative."""
        if nulls:
            raise self.unfit(f"has {nulls} null value(s)")
        if smallest is not None and smallest < 0:
            raise self.unfit(f"has the negative value {smallest}")

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise unless an Arrow schema has the column, with an integer type."""
        self.check_present(schema.names)
        typ = schema.field(self.name).type
        self.check_type(str(typ), pa.types.is_integer(typ))

    def epochs(self, table: pa.Table) -> list[int]:
        """The distinct epochs of an Arrow table, sorted, once the column has passed every check."""
        self.check_schema(table.schema)
        values = table.column(self.name)
        epochs = sorted(pc.unique(values.drop_null()).to_pylist())
        self.check_values(values.null_count, epochs[0] if epochs else None)
        return epochs

    def rows_of(self, table: pa.Table, epoch: int) -> pa.Table:
        """The rows of ``table`` at ``epoch``."""
        return table.filter(pc.equal(table.column(self.name), epoch))
