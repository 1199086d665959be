"""Small Relax IR helpers shared by the frontend and the build."""

from __future__ import annotations

from tvm import relax


def rebuild(expr, leaf):
    """Rebuild ``expr`` through tuples, tuple accesses and calls, replacing every other node by
    ``leaf(node)`` (variables, constants, shapes...). Calls keep their op, attributes and type arguments."""
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([rebuild(f, leaf) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return relax.TupleGetItem(rebuild(expr.tuple_value, leaf), expr.index)
    if isinstance(expr, relax.Call):
        return relax.Call(expr.op, [rebuild(a, leaf) for a in expr.args], expr.attrs, expr.ty_args)
    return leaf(expr)
