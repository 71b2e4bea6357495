"""The read path: the retrieval controller (pure decisions), System Two, and the HTTP API."""
