"""Smoke test for the node started by es.sh, through the official Python client.

    pip install 'elasticsearch>=9,<10'   # client major must match the server major (9)
    scripts/elasticsearch/es.sh start && python scripts/elasticsearch/smoke_test.py
"""

import os
import sys

from elasticsearch import Elasticsearch, helpers


def main() -> int:
    es = Elasticsearch(f"http://127.0.0.1:{os.environ.get('ES_PORT', '9200')}", request_timeout=30)
    info = es.info()  # the client also checks the X-Elastic-Product header here
    print("server", info["version"]["number"], "cluster", info["cluster_name"])

    idx = "jevmem-smoke"
    es.options(ignore_status=404).indices.delete(index=idx)
    es.indices.create(
        index=idx,
        settings={"number_of_shards": 1, "number_of_replicas": 0},
        mappings={"properties": {"title": {"type": "text", "analyzer": "standard"}}},
    )
    docs = [
        {"_index": idx, "_id": "1", "title": "The quick brown fox jumps over the lazy dog"},
        {"_index": idx, "_id": "2", "title": "Quick quick fox"},
        {"_index": idx, "_id": "3", "title": "An unrelated sentence about databases"},
    ]
    helpers.bulk(es, docs, refresh="wait_for")
    hits = es.search(index=idx, query={"match": {"title": "quick fox"}})["hits"]["hits"]
    for h in hits:
        print(h["_id"], round(h["_score"], 4), h["_source"]["title"])
    es.indices.delete(index=idx)

    ids = [h["_id"] for h in hits]
    ok = ids == ["2", "1"] and hits[0]["_score"] > hits[1]["_score"] > 0
    print("OK" if ok else f"UNEXPECTED ranking {ids}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
