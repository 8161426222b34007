"""10-second tumbling and 60/10-second sliding counts per key in PyFlink's SQL (its JVM
operators), for ``bench windows``: run with a Python that has ``apache-flink`` installed (not
one of raytide's dependencies; it needs a Java 11+ on the path), ``python windows_pyflink.py
SPEC.json``.

``SPEC.json`` holds ``folder`` (the events as CSV files of ``key,t_ms`` lines: the same rows as
the Parquet files the others read, because PyFlink from PyPI has no Parquet format, which is
the Maven artifact ``flink-sql-parquet``), ``max_delay`` (whole seconds), ``parallelism`` and
``out`` (a folder). One streaming job (a statement set of two ``INSERT``s sharing one source
scan, ``parallelism.default`` = ``parallelism``, session time zone UTC): a filesystem table
over the CSV folder (one split per file: CSV is not split), its time attribute
``t AS TO_TIMESTAMP_LTZ(t_ms, 3)`` with ``WATERMARK FOR t AS t - INTERVAL 'max_delay' SECOND`` (Flink's
bounded out-of-orderness, per source subtask, the least of them downstream, emitted every
200 ms of wall time, Flink's default), into ``TUMBLE(..., INTERVAL '10' SECOND)`` and
``HOP(..., INTERVAL '10' SECOND, INTERVAL '60' SECOND)`` window aggregations ``COUNT(*)``
grouped by key and window, each written as CSV by a filesystem sink. Flink's window
aggregation drops a record whose window (for ``HOP``, its 10-second slice) the watermark has
passed: late records are counted only in its metrics, not written anywhere.

``out/timing.json`` gets the seconds from submitting the job to its end (the JVM's start
and the Python start-up are left out; the job's scheduling and the mini-cluster's start are
in); the windows are in ``out/tumbling/`` and ``out/sliding/`` (part files, which are left
in progress without checkpoints: the caller reads them all).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", str(spec["parallelism"]))
    config.set("table.local-time-zone", "UTC")
    delay = int(spec["max_delay"])
    env.execute_sql(f"""
        CREATE TABLE events (
            `key` INT,
            t_ms BIGINT,
            t AS TO_TIMESTAMP_LTZ(t_ms, 3),
            WATERMARK FOR t AS t - INTERVAL '{delay}' SECOND
        ) WITH ('connector' = 'filesystem', 'path' = 'file://{spec["folder"]}', 'format' = 'csv')""")
    for kind in ("tumbling", "sliding"):
        env.execute_sql(f"""
            CREATE TABLE {kind}_out (
                `key` INT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT
            ) WITH ('connector' = 'filesystem', 'path' = 'file://{spec["out"]}/{kind}', 'format' = 'csv')""")
    statements = env.create_statement_set()
    statements.add_insert_sql("""
        INSERT INTO tumbling_out
        SELECT `key`, window_start, window_end, COUNT(*) FROM TABLE(
            TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
        GROUP BY `key`, window_start, window_end""")
    statements.add_insert_sql("""
        INSERT INTO sliding_out
        SELECT `key`, window_start, window_end, COUNT(*) FROM TABLE(
            HOP(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND, INTERVAL '60' SECOND))
        GROUP BY `key`, window_start, window_end""")
    start = time.perf_counter()
    statements.execute().wait()
    seconds = time.perf_counter() - start
    Path(f"{spec['out']}/timing.json").write_text(json.dumps({"run_s": seconds}))


if __name__ == "__main__":
    main(sys.argv[1])
