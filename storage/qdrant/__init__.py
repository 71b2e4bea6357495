"""The Qdrant backend: the distributed deployment's vector index on a Qdrant server (``index``).

Named ``storage.qdrant``; the third-party client is ``qdrant_client``, which this package does not
shadow.
"""
