"""Fixtures shared by the annotation tests."""

import pytest


@pytest.fixture(params=["copy", "rows"])
def import_path(request, settings) -> str:
    """Run the test on both write paths of the import: PostgreSQL's COPY into staging tables and
    set-based statements ("copy"), and the ORM's chunks that SQLite uses ("rows"). The rules and
    the counts must not depend on the path."""
    settings.CONCORD_IMPORT_BULK = request.param == "copy"
    return request.param
