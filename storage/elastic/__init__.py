"""The Elasticsearch backend of the distributed deployment.

``store`` (the node store and BM25 lexical index, the shared client helpers and error
translation, write visibility), ``edges`` (the edge store, edges in groups) and ``vectors`` (the
vector index used when no Qdrant server is configured). Each implements ports of
:mod:`storage.ports`.
"""
