"""Workloads the benchmarks run on raytide: dataflows tuned for speed, too specialised for the package.

* :mod:`bench.workloads.columnar`: vectorised building blocks for vertices that own
  nodes (id -> slot index, CSR adjacency, minimum per key), pure NumPy.
* :mod:`bench.workloads.components`: connected components by label propagation in a
  raytide loop, built from them; ``bench/bench_components.py`` times it.

The examples in ``examples/`` show the same ideas written to be read; these are written
to be fast, and the benchmarks hold them to the hand-written baselines.
"""
