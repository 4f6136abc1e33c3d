"""`api.headers`: which security headers each kind of response gets (issue 9)."""

from __future__ import annotations

import pytest

from api.headers import headers_for


@pytest.mark.parametrize("path", ["/ui/login", "/ui/reviews/3", "/ui", "/"])
def test_console_pages_forbid_framing_inline_code_and_caching(path: str) -> None:
    headers = headers_for(path)
    csp = headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["Cache-Control"] == "no-store"


def test_console_static_files_may_be_cached() -> None:
    headers = headers_for("/ui/static/console.css")
    assert "Cache-Control" not in headers and headers["X-Frame-Options"] == "DENY"


def test_api_answers_are_data_not_pages_and_never_stored() -> None:
    headers = headers_for("/api/v1/runs")
    assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert headers["Cache-Control"] == "no-store"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "Cache-Control" not in headers_for("/healthz")


def test_the_docs_page_gets_no_csp_that_would_blank_it() -> None:
    assert "Content-Security-Policy" not in headers_for("/docs")
