"""Composition root: settings, wiring, CLI and benchmarks. The only place that reads the
environment; everything below it takes explicit objects."""
