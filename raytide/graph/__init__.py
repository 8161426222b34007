"""Graph algorithms on raytide's columnar keyed state: connected components, shortest paths, PageRank.

Each takes a stream of edge batches (dicts of NumPy columns ``src``, ``dst`` and, for
shortest paths, ``weight``; :func:`edge_columns` converts ``(u, v)`` pairs) and returns a
stream of per-epoch results. The edges enter a loop once per epoch and stay there,
arranged by source (a CSR per replica); node state lives in columns across epochs, so a
new epoch's edges start from the previous results (incremental), except PageRank, which
recomputes over all the edges so far. Epochs enter the loop one after another
(docs/iteration.md). Pure: no Ray.
"""

from raytide.graph.components import connected_components as connected_components
from raytide.graph.edges import edge_columns as edge_columns
from raytide.graph.pagerank import pagerank as pagerank
from raytide.graph.paths import shortest_paths as shortest_paths
