"""Test doubles shared by the unit and integration tests."""
