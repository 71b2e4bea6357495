"""The embedded backend: stores on SQLite (WAL) in one process.

``store`` (nodes, the FTS5 BM25 lexical index, dead letters, opening a store), ``edges`` (the
edge store and consolidation decisions), ``vectors`` (exact vector search over the node table's
own vectors) and ``base`` (what they share: error translation, transactions, opening a file).
Each implements ports of :mod:`storage.ports`; no ``sqlite3`` exception leaves them.
"""
