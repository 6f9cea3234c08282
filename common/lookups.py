"""Query pieces the ORM lacks.

``AnyOf(F("pk"), ids)``: the rows whose column is one of ``ids``, as one array parameter on
PostgreSQL (``col = ANY(%s)``) and as ``IN (...)`` elsewhere. A list of thousands of ids as an
``IN`` list costs more to bind, compile and plan than the index lookups it asks for: reading one
2,000-comparison export chunk's prompts and responses took 81 ms through ``pk__in`` against 15 ms
as arrays (``bench/bench_export.py``'s database).
"""

from __future__ import annotations

from django.db.models.lookups import In


class AnyOf(In):
    """``In`` with the values as one PostgreSQL array: usable in ``filter()`` as a lookup
    expression, ``Model.objects.filter(AnyOf(F("pk"), ids))``; ``ids`` a list of integers."""

    def as_postgresql(self, compiler, connection):
        if not isinstance(self.rhs, list | tuple | set | frozenset):
            return super().as_sql(compiler, connection)  # a subquery: IN (SELECT ...)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = [int(value) for value in self.rhs]
        return f"{lhs} = ANY(%s)", (*lhs_params, values)
