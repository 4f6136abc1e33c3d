"""The documentation's reference pages, generated from the code (issue 28) and committed under
docs/reference/ (`ops.docs.pages`: `python -m ops.docs.pages` writes them). Each page has a
module that renders it as Markdown: `cli_reference` (the Typer app), `settings_reference`
(`models.settings.Settings`), `api_reference` (the OpenAPI spec), `metrics_reference` (the
Prometheus definitions). They import what they document and nothing of the site, so tests can
render a page without building it.
"""
