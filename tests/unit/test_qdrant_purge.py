"""The pure parts of the Qdrant purge: how much filler rolls the write-ahead log, which segments a
node's telemetry reports, and the padding points' ids."""

from __future__ import annotations

from storage.qdrant.purge import FILLER_CHUNK_MB, FILLER_ID, pad_ids, roll_chunks, segments_of


def test_the_roll_closes_the_open_segment_and_pushes_it_past_the_retained_ones() -> None:
    assert sum(roll_chunks(1, 1)) == 3 << 20
    assert sum(roll_chunks(1, 0)) == 2 << 20
    big = roll_chunks(32, 1)  # a collection made with Qdrant's default log
    assert sum(big) >= 96 << 20 and max(big) <= FILLER_CHUNK_MB << 20
    assert roll_chunks(1, -3) == roll_chunks(1, 0)


def seg(deleted: int, n: int) -> dict[str, object]:
    return {"info": {"uuid": f"s{deleted}-{n}", "num_deleted_vectors": deleted, "num_vectors": n}}


def test_segments_are_read_for_one_collection_across_its_local_shards() -> None:
    telemetry = {"result": {"collections": {"collections": [
        {"id": "other", "shards": [{"local": {"segments": [seg(5, 500)]}}]},
        {"id": "mine", "shards": [{"local": {"segments": [seg(0, 40), seg(3, 90)]}}, {"local": None},
                                  {"local": {"segments": [seg(1, 1000)]}}]},
    ]}}}
    assert segments_of(telemetry, "mine") == [("s0-40", 0, 40), ("s3-90", 3, 90), ("s1-1000", 1, 1000)]
    assert segments_of(telemetry, "absent") == []
    assert segments_of({}, "mine") == []


def test_padding_ids_are_stable_and_never_the_fillers() -> None:
    assert pad_ids(3) == pad_ids(3) and len(set(pad_ids(300))) == 300
    assert FILLER_ID not in pad_ids(300)
