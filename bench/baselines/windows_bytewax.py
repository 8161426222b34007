"""10-second tumbling and 60/10-second sliding counts per key in Bytewax 0.21, for ``bench
windows``: run with a Python that has ``bytewax==0.21.*`` and ``pyarrow`` installed (neither is
one of raytide's dependencies), ``python windows_bytewax.py SPEC.json``.

``SPEC.json`` holds ``files`` (Parquet files with an integer column ``key`` and a
``timestamp[ms, UTC]`` column ``t``), ``max_delay`` (seconds), ``processes`` and ``out`` (a
folder). The program is Bytewax's own windowing: a ``FixedPartitionedSource`` with one
partition per file (rows as ``(key, datetime)`` items, read with pyarrow in batches), and two
``count_window`` steps keyed by ``str(key)``, each with an ``EventClock(ts_getter,
wait_for_system_duration=max_delay)`` and a ``TumblingWindower(10 s)`` /
``SlidingWindower(60 s, offset 10 s)`` aligned to the Unix epoch. Bytewax's clocks are per key
(its window state is keyed), so an item is late when it is more than ``max_delay`` behind the
latest item of its key (plus the system time since); late items go to the step's ``late``
stream, which is counted (a sliding step's late stream has an item per window the late item
falls in).

The program starts ``processes`` processes of one worker each (``bytewax.run.cli_main`` with
``-i``/``-a``, as ``python -m bytewax.testing -p N`` does), each writing its windows to
``out/windows-<i>.csv`` (``kind,key,window_id,count``) and, in ``out/timing-<i>.json``, the
wall-clock time (``time.time()``) its dataflow started and ended, the items it read and the
late items it saw. The caller's time is from the first start to the last end: interpreter and
import start-up are left out, the cluster's connection and the whole run are in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
BATCH_ROWS = 8192


def build_flow(spec: dict, process: int):  # noqa: ANN201
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    read = {"items": 0, "late_tumbling": 0, "late_sliding": 0}

    class FilePartition(StatefulSourcePartition):
        def __init__(self, path: str) -> None:
            self.batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=["key", "t"])

        def next_batch(self) -> list:
            batch = next(self.batches, None)
            if batch is None:
                raise StopIteration
            keys = batch.column(0).to_pylist()
            stamps = batch.column(1).to_pylist()
            read["items"] += len(keys)
            return list(zip(keys, stamps))

        def snapshot(self) -> None:
            return None

    class ParquetFiles(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [str(i) for i in range(len(spec["files"]))]

        def build_part(self, step_id: str, for_part: str, resume_state: object) -> FilePartition:
            return FilePartition(spec["files"][int(for_part)])

    class Lines(StatelessSinkPartition):
        def __init__(self, path: str) -> None:
            self.file = open(path, "w")  # noqa: SIM115

        def write_batch(self, items: list) -> None:
            self.file.write("".join(items))
            self.file.flush()

        def close(self) -> None:
            self.file.close()

    class CsvSink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Lines:
            return Lines(f"{spec['out']}/windows-{process}.csv")

    def count_late(kind: str) -> None:
        read[f"late_{kind}"] += 1

    flow = Dataflow("windows")
    events = op.input("parquet", flow, ParquetFiles())
    delay = timedelta(seconds=spec["max_delay"])
    outs = []
    for kind, windower in (("tumbling", win.TumblingWindower(length=timedelta(seconds=10), align_to=EPOCH)),
                           ("sliding", win.SlidingWindower(length=timedelta(seconds=60), offset=timedelta(seconds=10),
                                                           align_to=EPOCH))):
        clock = win.EventClock(ts_getter=lambda e: e[1], wait_for_system_duration=delay)
        counted = win.count_window(kind, events, clock, windower, lambda e: str(e[0]))
        outs.append(op.map(f"{kind}_line", counted.down,
                           lambda kv, kind=kind: f"{kind},{kv[0]},{kv[1][0]},{kv[1][1]}\n"))
        op.inspect(f"{kind}_late", counted.late, lambda step, item, kind=kind: count_late(kind))
    op.output("out", op.merge("both", *outs), CsvSink())
    return flow, read


def worker(spec_path: str, process: int) -> None:
    from bytewax.run import cli_main

    spec = json.loads(Path(spec_path).read_text())
    flow, read = build_flow(spec, process)
    addresses = [f"localhost:{spec['port'] + i}" for i in range(spec["processes"])]
    start = time.time()
    cli_main(flow, workers_per_process=1, process_id=process, addresses=addresses)
    end = time.time()
    Path(f"{spec['out']}/timing-{process}.json").write_text(json.dumps({"start": start, "end": end, **read}))


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    procs = [subprocess.Popen([sys.executable, __file__, spec_path, str(i)], env={**os.environ})
             for i in range(spec["processes"])]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a Bytewax process failed: exit codes {codes}")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        worker(sys.argv[1], int(sys.argv[2]))
    else:
        main(sys.argv[1])
