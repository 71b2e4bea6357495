"""Updates and non-updates worded as chat exclamations, in none of our generators' tables.

    python scripts/probe_fresh_updates.py [--min-about P ...]

Each case is one five-turn conversation of the embedded default (real models): a person states a
fact ("My gym is Fitzone."), a friend and the person chat, then the person says a last turn: an
update worded as an exclamation ("Leg day at Ironside, ouch!"), or, in the other half, an
exclamation that updates nothing ("So sore after yesterday, ouch!"). The probe reports, for each
``MIN_ABOUT`` given (default: the shipped value and 1.1, which turns the attribute model's reading
off), whether the last turn supersedes the first (a ``supersedes`` edge), per case and counted, as
JSON. About 10 s on two cores. The wordings are a check written apart from every table a model
was trained or benchmarked on; they are not tuned to.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from jevmem.settings import Settings
from jevmem.wiring import build_embedded
from query_api.retrieval import currency
from topology import ids
from topology.embedding import default_embedder
from topology.params import Params
from topology.schemas import Observation, Scope
from topology.stages import updates

T0 = datetime(2024, 5, 1, tzinfo=UTC)
#: (stated fact, a later update worded as an exclamation)
UPDATES: tuple[tuple[str, str], ...] = (
    ("I work at Brightline Bank.", "First day at Corvid Labs tomorrow, eek!"),
    ("My partner is Tom.", "Anniversary dinner with Liam tonight, so happy!"),
    ("I drive a grey Peugeot 208.", "Picked up my Mazda 3 from the dealer today, woohoo!"),
    ("I live in Bristol.", "Unpacking boxes in my Glasgow flat, send help!"),
    ("My gym is Fitzone.", "Leg day at Ironside, ouch!"),
    ("My manager is Priya.", "Weekly one-to-one with Omar, wish me luck!"),
    ("My hobby is chess.", "Three hours of pottery today, love it!"),
    ("I use a Pixel 7.", "Dropped my iPhone 14 twice already, oops!"),
)
#: (stated fact, a later exclamation that replaces nothing)
OTHERS: tuple[tuple[str, str], ...] = (
    ("I work at Brightline Bank.", "Rainy Monday again, ugh!"),
    ("My partner is Tom.", "Tom made pancakes this morning, yum!"),
    ("I drive a grey Peugeot 208.", "Stuck in traffic for an hour, ugh!"),
    ("I live in Bristol.", "Bristol is so pretty in the snow, wow!"),
    ("My gym is Fitzone.", "So sore after yesterday, ouch!"),
    ("My manager is Priya.", "Big deadline on Friday, wish me luck!"),
    ("My hobby is chess.", "Finally finished that novel, love it!"),
    ("I use a Pixel 7.", "My sister lost her phone again, oops!"),
)
BETWEEN = (("Ben", "Nice, how was your week?"), ("Ana", "I had toast for breakfast."), ("Ben", "Cool."))


def _said(conversation: str, i: int, text: str, speaker: str) -> Observation:
    return Observation(tenant_id="t1", conversation_id=conversation, event_id=f"{conversation}-{i}", content=text,
                       speaker=speaker, role="user", observed_at=T0 + timedelta(hours=i))


async def _supersedes(old: str, new: str, conversation: str) -> bool:
    """Whether ``new``, said four turns after ``old`` by the same person, supersedes it."""
    mem = build_embedded(Settings(params=Params()), embedder=default_embedder(), data_dir=":memory:")
    try:
        turns = [_said(conversation, 0, old, "Ana")]
        turns += [_said(conversation, i + 1, text, who) for i, (who, text) in enumerate(BETWEEN)]
        turns.append(_said(conversation, len(turns), new, "Ana"))
        await mem.pipeline.ingest(turns)
        scope = Scope(tenant_id="t1", conversation_id=conversation)
        edge = (ids.node_id("t1", conversation, turns[-1].event_id), ids.node_id("t1", conversation, turns[0].event_id))
        return edge in {(e.source, e.target) for e in await mem.stores.edges.scan(scope) if e.label == currency.SUPERSEDES}
    finally:
        await mem.close()


async def probe(gates: list[float]) -> dict[str, Any]:
    """Per gate: the cases and whether each last turn superseded the first, and the counts."""
    shipped, out = updates.MIN_ABOUT, {}
    try:
        for gate in gates:
            updates.MIN_ABOUT = gate
            got: dict[str, list[dict[str, Any]]] = {}
            for name, cases in (("updates", UPDATES), ("others", OTHERS)):
                got[name] = [{"older": old, "newer": new, "supersedes": await _supersedes(old, new, f"{name}{k}")}
                             for k, (old, new) in enumerate(cases)]
            out[str(gate)] = {"updates_caught": f"{sum(c['supersedes'] for c in got['updates'])} of {len(UPDATES)}",
                              "others_superseding": f"{sum(c['supersedes'] for c in got['others'])} of {len(OTHERS)}",
                              **got}
    finally:
        updates.MIN_ABOUT = shipped
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--min-about", type=float, nargs="*", default=[updates.MIN_ABOUT, 1.1])
    args = ap.parse_args(argv)
    sys.stdout.write(orjson.dumps(asyncio.run(probe(args.min_about)), option=orjson.OPT_INDENT_2).decode() + "\n")


if __name__ == "__main__":
    main()
