"""Storage ports (vector index, lexical index, node and edge stores) and their adapters."""
