"""The progress tracker on a small looped graph, printing frontiers as updates arrive.

    python examples/progress_demo.py

A source feeds a loop (enter -> body -> feedback -> body, body -> leave -> sink). We
play the pointstamp updates a running job would send and print, after each batch, the
frontier at the sink's input and whether the sink may be notified that epoch 0 is done.
"""

from __future__ import annotations

from raytide.progress import GraphBuilder, Location, PathSummary, Timestamp, Tracker


def looped_graph():
    b = GraphBuilder()
    b.add_vertex("source", inputs=0)
    b.add_vertex("enter", summaries=[PathSummary.ingress()])
    b.add_vertex("body", inputs=2, depth=1)
    b.add_vertex("feedback", depth=1, summaries=[PathSummary.feedback(bound=3)])
    b.add_vertex("leave", depth=1, summaries=[PathSummary.egress()])
    b.add_vertex("sink", outputs=0)
    for edge in [("source", 0, "enter", 0), ("enter", 0, "body", 0), ("body", 0, "feedback", 0),
                 ("feedback", 0, "body", 1), ("body", 0, "leave", 0), ("leave", 0, "sink", 0)]:
        b.add_edge(*edge)
    return b.build()


def main() -> None:
    tracker = Tracker(looped_graph())
    src, sink = Location.of_vertex("source"), Location.of_vertex("sink")
    body_in, back_in, sink_in = Location.of_input("body", 0), Location.of_input("body", 1), Location.of_input("sink", 0)
    steps = [
        ("source holds epoch 0, sink asks to be notified at 0", [(src, Timestamp(0), 1), (sink, Timestamp(0), 1)]),
        ("source sends into the loop and moves to epoch 1",
         [(body_in, Timestamp(0, (0,)), 1), (src, Timestamp(0), -1), (src, Timestamp(1), 1)]),
        ("body sends iteration 1 around the loop", [(body_in, Timestamp(0, (0,)), -1), (back_in, Timestamp(0, (1,)), 1)]),
        ("body's iteration 1 converges and leaves the loop", [(back_in, Timestamp(0, (1,)), -1), (sink_in, Timestamp(0), 1)]),
        ("sink consumes epoch 0's result", [(sink_in, Timestamp(0), -1)]),
    ]
    for label, updates in steps:
        for location, time, delta in updates:
            tracker.update(location, time, delta)
        tracker.propagate()
        print(f"{label}:\n    frontier at sink input {tracker.frontier(sink_in)}, "
              f"may notify sink at epoch 0: {tracker.may_notify('sink', Timestamp(0))}")


if __name__ == "__main__":
    main()
