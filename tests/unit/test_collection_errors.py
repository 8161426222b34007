"""Bad input to collections fails with an error naming the vertex, the replica, the time and
what was wrong (in the in-process runtime, which runs the same vertices as Ray); misuse of
the API is refused while the dataflow is built."""

from __future__ import annotations

import re

import pytest

import raytide as rt
from raytide.testing import LocalJob


def failure_of(flow: rt.Dataflow, inputs: dict) -> rt.RaytideError:
    run = LocalJob(flow, inputs, parallelism=2, seed=0).run()
    assert isinstance(run.failure, rt.RaytideError), run
    return run.failure


@pytest.mark.parametrize(("update", "says"), [
    (("a", 1.5), "diff of type float"),
    (("a", True), "diff of type bool"),
    ("a", "is not a pair"),
    ((["a"], 1), "unhashable record of type list"),
])
def test_an_update_that_is_not_a_record_and_an_integer_diff_is_refused_naming_where(update, says):
    flow = rt.Dataflow("bad")
    flow.collection("rows").distinct().output("out")
    error = failure_of(flow, {"rows": [[("ok", 1)], [("ok", -1), update]]})
    assert isinstance(error, rt.RecordError)
    assert "vertex 'rows.updates' replica " in str(error)
    assert re.search(rf"at Timestamp\(1\): collection 'rows': update \d of the batch, {re.escape(repr(update))}, .*{says}",
                     str(error)), error


def test_keys_of_mixed_types_are_refused_naming_both():
    flow = rt.Dataflow("mixed")
    flow.collection("rows").count(lambda r: r[0], name="per-key").output("out")
    error = failure_of(flow, {"rows": [[((1, "x"), 1), (("1", "y"), 1)]]})
    assert isinstance(error, rt.UserCodeError) and error.vertex == "per-key" and error.time == rt.Timestamp(0)
    assert "key '1' is a str, earlier keys were of kind number" in str(error)


def test_the_two_sides_of_a_join_must_have_keys_of_one_kind():
    flow = rt.Dataflow("mixed-join")
    left, right = flow.collection("left"), flow.collection("right")
    left.join(right, lambda r: r[0], name="joining").output("out")
    error = failure_of(flow, {"left": [[((1, "x"), 1)]], "right": [[(("1", "y"), 1)]]})
    assert isinstance(error, rt.UserCodeError) and error.vertex == "joining"
    assert "earlier keys were of kind" in str(error)


def test_a_reduce_that_depends_on_the_order_of_its_records_is_refused():
    flow = rt.Dataflow("order")
    flow.collection("rows").reduce(lambda r: r[0], lambda key, rows: [rows[0]], name="first").output("out")
    error = failure_of(flow, {"rows": [[(("k", 1), 1), (("k", 2), 1)]]})
    assert isinstance(error, rt.RecordError)
    assert "vertex 'first' replica" in str(error) and "not deterministic on a multiset: for key 'k'" in str(error)


def test_more_removed_than_added_is_refused_at_a_reduction():
    flow = rt.Dataflow("negative")
    flow.collection("rows").count(lambda r: r, name="counting").output("out")
    error = failure_of(flow, {"rows": [[("a", 1)], [("a", -2)]]})
    assert isinstance(error, rt.RecordError) and "vertex 'counting' replica" in str(error)
    assert "at Timestamp(1): key 'a' at Timestamp(1): value 'a' has -1 copies (more removed than added)" in str(error)


def test_collection_operators_refuse_plain_streams_and_bodies_that_return_none():
    flow = rt.Dataflow("misuse")
    rows, plain = flow.collection("rows"), flow.input("plain")
    with pytest.raises(rt.GraphError, match="join on collection 'rows.updates' takes collections.*as_collection"):
        rows.join(plain, lambda r: r)  # type: ignore[arg-type]
    with pytest.raises(rt.GraphError, match="takes collections"):
        rows.concat(plain)  # type: ignore[arg-type]
    with pytest.raises(rt.GraphError, match="the body must return a Collection inside its loop"):
        rows.iterate(lambda c: None)  # type: ignore[arg-type,return-value]
    assert isinstance(plain.as_collection().join(rows, lambda r: r), rt.Collection)


def test_joins_and_sums_by_column_name_are_refused_while_the_dataflow_is_built_when_they_cannot_run():
    flow = rt.Dataflow("named")
    orders, plain = flow.collection("orders").with_columns("order", "customer"), flow.collection("plain")
    customers = flow.collection("customers").with_columns("customer", "order")
    for build, says in [
        (lambda: plain.join(orders, "customer"), "has no named columns"),
        (lambda: orders.join(plain, "customer"), "has no named columns"),
        (lambda: orders.sum("region", "order"), "no column 'region'"),
        (lambda: orders.join(customers, "customer"), r"columns \['order'\] are on both sides"),
        (lambda: orders.sum("customer", lambda r: r[0]), "value must name a column too"),
        (lambda: plain.join(plain, lambda r: r, "customer"), "so key must name a column too"),
        (lambda: flow.collection("x").with_columns("a", "a"), "give distinct column names"),
        (lambda: orders.iterate(lambda c: c.with_columns("order", "customer").sum("customer", "order")), "only at top level"),
    ]:
        with pytest.raises(rt.GraphError, match=says):
            build()


def test_records_that_do_not_fit_the_named_columns_are_refused_naming_where():
    flow = rt.Dataflow("named-bad")
    flow.collection("rows").with_columns("k", "v", name="named").sum("k", "v").output("out")
    error = failure_of(flow, {"rows": [[((1, 2), 1)], [((1, 2, 3), 1)]]})
    assert isinstance(error, rt.RecordError)
    assert re.search(r"vertex 'named' replica \d at Timestamp\(1\): records such as \(1, 2, 3\) read as 2 columns", str(error)), error
