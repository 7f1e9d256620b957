"""Pieces of raw SQL shared by the apps' hot queries."""

import operator
from collections.abc import Iterable


def bigint_array(ids: Iterable[int]) -> str:
    """`ids` as a PostgreSQL array literal, the parameter of `= ANY(%s::bigint[])`. A text
    parameter goes to PostgreSQL as it is, where a list goes through psycopg's array dumper:
    10-30 µs more CPU per query in-process (of 45-80), on the usage path's two such queries per
    call. Integers only (`operator.index` refuses anything else), so nothing in the literal
    needs quoting."""
    return "{" + ",".join(str(operator.index(i)) for i in ids) + "}"
