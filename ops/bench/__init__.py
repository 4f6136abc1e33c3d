"""Benchmark scripts: they print figures and ratios; they check no behaviour."""
