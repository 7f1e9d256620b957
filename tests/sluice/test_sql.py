"""sluice.sql: an array literal PostgreSQL reads as the ids it was given, and nothing else."""

import pytest
from django.db import connection

from sluice.sql import bigint_array


@pytest.mark.django_db
@pytest.mark.parametrize("ids", [[], [7], [3, 1, 2**62]])
def test_postgresql_reads_the_ids_back(ids):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::bigint[]", [bigint_array(ids)])
        assert cursor.fetchone()[0] == ids


@pytest.mark.parametrize("bad", ["1}", "1,2", "1); DROP TABLE x; --", 1.5, None])
def test_anything_but_an_integer_is_refused(bad):
    with pytest.raises((ValueError, TypeError)):
        bigint_array([bad])
