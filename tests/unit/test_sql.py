"""`models.sql.driver_sql`: statements written for `sa.text` become psycopg's parameter style."""

from __future__ import annotations

from models.sql import driver_sql


def test_named_parameters_become_psycopg_s_and_casts_are_left_alone() -> None:
    got = driver_sql("SELECT :a, CAST(:b AS jsonb), '{}'::jsonb, x::int FROM t WHERE y = :a")
    assert got == "SELECT %(a)s, CAST(%(b)s AS jsonb), '{}'::jsonb, x::int FROM t WHERE y = %(a)s"


def test_percent_signs_are_doubled_so_the_driver_keeps_them() -> None:
    assert driver_sql("SELECT 'a%' LIKE :p") == "SELECT 'a%%' LIKE %(p)s"


def test_a_colon_inside_a_word_or_a_time_is_not_a_parameter() -> None:
    assert driver_sql("SELECT '10:30', a:b") == "SELECT '10:30', a:b"
