"""Shared column arrangements, found (``core/arranged_columns.py``): every join of a collection by
one key column reads one arrangement of it, asked for (``arrange_by_key(column)``) or not.

Three joins of ``orders`` by ``c`` (two with ``orders`` on the left, one on the right) are one
vertex with a port and an output each, in the in-process runtime at widths 1-3; their changes
equal the same joins placed apart (each its own vertex, forced by ``name=``) and a brute-force
join of the contents after every epoch; the orders are held once.
"""

from __future__ import annotations

from collections import Counter

import pytest

import raytide as rt
from raytide.core.arranged_columns import ArrangedColumns
from raytide.testing.local import LocalJob

ORDERS = [[((i, i % 4, 10 * i), 1) for i in range(12)], [((0, 0, 0), -1), ((12, 1, 120), 1)], [((5, 1, 50), -1)]]
INPUTS = {"orders": ORDERS, "customers": [[((c, 100 + c), 1) for c in range(3)], [((3, 103), 1)]],
          "flags": [[], [((1, 7), 1), ((1, 8), 1)], [((3, 9), 1)]]}


def joins_flow(shared: bool) -> rt.Dataflow:
    """``orders`` joined by ``c`` with ``customers`` and ``flags``, and ``flags`` with ``orders``."""
    flow = rt.Dataflow("orders")
    orders = flow.collection("orders").with_columns("o", "c", "amount")
    customers = flow.collection("customers").with_columns("c", "region")
    flags = flow.collection("flags").with_columns("c", "flag")
    apart = (lambda label: {"name": label}) if not shared else (lambda label: {})  # noqa: E731
    orders.join(customers, "c", **apart("a")).output("with-region")
    orders.join(flags, "c", **apart("b")).output("with-flag")
    flags.join(orders, "c", **apart("c")).output("flag-orders")
    return flow


def brute(epoch: int) -> dict[str, Counter]:
    """Each join's contents after ``epoch``, from the inputs' contents."""
    contents = {name: +sum((Counter(dict(updates)) for updates in epochs[: epoch + 1]), Counter())
                for name, epochs in INPUTS.items()}
    orders, customers, flags = contents["orders"], contents["customers"], contents["flags"]
    return {"with-region": Counter({(*o, r[1]): n * m for o, n in orders.items() for r, m in customers.items() if o[1] == r[0]}),
            "with-flag": Counter({(*o, f[1]): n * m for o, n in orders.items() for f, m in flags.items() if o[1] == f[0]}),
            "flag-orders": Counter({(*f, o[0], o[2]): n * m for f, n in flags.items() for o, m in orders.items()
                                    if o[1] == f[0]})}


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_joins_of_one_collection_by_one_column_read_one_arrangement_and_equal_brute_force(parallelism):
    flow = joins_flow(shared=True)
    joins = [name for name in flow.vertices if name.startswith("join") and "." not in name]
    assert len(joins) == 1 and flow.vertices[joins[0]].outputs == 3 and len(flow.vertices[joins[0]].inputs) == 4
    job = LocalJob(flow, INPUTS, parallelism, seed=parallelism)
    run = job.run()
    assert run.finished and run.failure is None
    apart_job = LocalJob(joins_flow(shared=False), INPUTS, parallelism, seed=parallelism)
    apart = apart_job.run()
    assert {name: {e: Counter(dict(c)) for e, c in per.items()} for name, per in run.outputs.items()} == \
        {name: {e: Counter(dict(c)) for e, c in per.items()} for name, per in apart.outputs.items()}
    for name in brute(0):
        total: Counter = Counter()
        for epoch in range(len(ORDERS)):
            total.update(dict(run.outputs[name].get(epoch, [])))
            assert +total == brute(epoch)[name] and not -total, (name, epoch)
    held, held_apart = statistics(job, joins), statistics(apart_job, ["a", "b", "c"])
    orders = sum(len(epoch) for epoch in ORDERS)  # every update held (they net as segments merge), once
    assert held["shared_updates"] == orders, held
    assert held_apart["arranged_updates"] - held["arranged_updates"] == 2 * orders, (held, held_apart)


def statistics(job: LocalJob, vertices: list[str]) -> Counter:
    """The counters of ``vertices`` over all replicas."""
    held: Counter = Counter()
    for replica in job.replicas.values():
        for name in vertices:
            if name in replica.vertices:
                held.update(replica.vertices[name].statistics())
    return held


def test_arrange_by_key_by_column_gives_the_arrangement_joins_find():
    flow = rt.Dataflow("explicit")
    orders = flow.collection("orders").with_columns("o", "c", "amount")
    customers = flow.collection("customers").with_columns("c", "region")
    arranged = orders.arrange_by_key("c", name="orders-by-c")
    assert isinstance(arranged, ArrangedColumns) and orders.arrange_by_key("c") is arranged
    assert arranged.join(customers).names == ("o", "c", "amount", "region")
    assert customers.join(arranged, "c").names == ("c", "region", "o", "amount")
    assert orders.join(customers, "c").names == ("o", "c", "amount", "region")  # found, not asked for
    assert flow.vertices["orders-by-c"].outputs == 3
    assert [name for name in flow.vertices if name.startswith("join") and "." not in name] == []


def test_a_join_of_its_own_name_or_width_places_its_own_vertex():
    flow = rt.Dataflow("own")
    orders = flow.collection("orders").with_columns("o", "c", "amount")
    customers = flow.collection("customers").with_columns("c", "region")
    orders.join(customers, "c", name="first")
    orders.join(customers, "c", name="second")
    orders.join(customers, "c", parallelism=3)
    orders.join(customers, "c", parallelism=3)  # finds the one of width 3
    assert [flow.vertices[name].outputs for name in flow.vertices if name in ("first", "second")] == [1, 1]
    wide = [vertex for vertex in flow.vertices.values() if vertex.parallelism == 3]
    assert len(wide) == 1 and wide[0].outputs == 2


def test_column_arrangements_refuse_what_they_cannot_read():
    flow = rt.Dataflow("bad")
    orders = flow.collection("orders").with_columns("o", "c", "amount")
    other = flow.collection("other").with_columns("c", "amount")
    arranged = orders.arrange_by_key("c")
    with pytest.raises(rt.GraphError, match=r"columns \['amount'\] are on both sides"):
        arranged.join(other)
    with pytest.raises(rt.GraphError, match="one vertex holds an arrangement"):
        arranged.join(other.arrange_by_key("c"))
    with pytest.raises(rt.GraphError, match="give this collection's key column only"):
        other.join(arranged, "c", "o")
    with pytest.raises(rt.GraphError, match="no column 'x'"):
        arranged.join(other, "x")
    with pytest.raises(rt.GraphError, match="a key column needs named columns"):
        flow.collection("plain").arrange_by_key("c")
    with pytest.raises(rt.GraphError, match="already has a vertex named 'orders'"):
        orders.join(other.with_columns("c", "x"), "c", name="orders")
    # the join that failed is not kept, nor found: the arrangement asked for above still is
    assert orders.join(other.with_columns("c", "y"), "c").names == ("o", "c", "amount", "y")
    assert flow.vertices[arranged.name].outputs == 1
