"""Retrieval: the read path behind the API surface.

The controller (route -> anchors -> expand -> rescore -> top-K evidence), its pure formulas and
feature rows, candidate scoring, reaches (one conversation or a realm), what is still true
(``currency``), whose fact a memory states (``subjects``), the per-node derivation cache, the
static baselines and System Two, the answer writer. Nothing here parses a request or checks a
key: the use cases of :mod:`query_api.service` and the front ends call in.
"""
