"""The physical job: the frozen plan compiled from a dataflow (replicas, chains, channels,
the progress graph), the typed messages between its actors, and how record batches travel
on the wire. Pure: nothing here imports Ray."""
