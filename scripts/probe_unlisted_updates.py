"""Updates of facts whose attributes are in none of our tables, and remarks that update nothing.

    python scripts/probe_unlisted_updates.py [LONGMEMEVAL_DIR] [--haystacks 1] [--params JSON]

One user's memory across sessions holds, for each fact of :data:`probe_unlisted_facts.FACTS`
(a football team, a dentist, a sister's city, ...), the fact, a friend's look-alike, and later
either an update of it in the user's words (:data:`UPDATES`: half worded with a change cue, half
without) or, for the facts that do not change, a remark on the same topic that changes nothing
(:data:`REMARKS`). With ``LONGMEMEVAL_DIR``, the turns are added to the first ``--haystacks``
LongMemEval haystacks (every tenth file), else to sessions of their own. Each fact's question is
then asked in the first person through the recall users call (``user_id``).

Reported as JSON: ``stale_flagged`` (the replaced fact is superseded by its update: a
``supersedes`` edge), ``current_first`` (the update ranks first for the question),
``stable_wrongly_flagged`` (a fact that did not change is superseded by anything) and
``stable_first``, with the misses listed. The wordings are a check written apart from every
table a model was trained or benchmarked on; they are not tuned to.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from probe_unlisted_facts import FACTS, REPLIES, run, said_in_sessions  # this folder is on the path of a script run as a file

from jevmem.bench import longmemeval as lme
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from query_api.retrieval.currency import SUPERSEDES
from topology.embedding import default_embedder
from topology.params import Params
from topology.schemas import Scope

#: fact index -> the user's later update of it (the first half with a change cue, then without)
UPDATES: dict[int, str] = {
    0: "I've switched to supporting Hibernian, Celtic lost me this year.",
    1: "I gave up the cello and now play the double bass.",
    2: "I've changed dentists, I now see Dr Patel at Bright Smiles.",
    6: "I moved my current account from Monzo to Starling.",
    9: "These days I order a cortado with regular milk instead.",
    11: "I dropped Japanese and started learning Korean.",
    14: "My sister Lena has just relocated to Hamburg.",
    20: "I sold the Surly and bought a Cannondale gravel bike.",
    3: "Jasmine pearl is my favourite tea at the moment.",
    7: "N. K. Jemisin has become my favourite author.",
    8: "I get my hair cut at the Fade Room on Bold Street.",
    12: "My favourite band is Fontaines D.C. after that gig.",
    13: "Wingspan is my favourite board game, it beats everything.",
    15: "My brother Tom works as a nurse on a cardiac ward.",
    21: "I run 15k every Sunday morning.",
    23: "I listen to The Rest Is History on my commute.",
}
#: fact index -> a later remark by the user on the same topic that changes nothing
REMARKS: dict[int, str] = {
    4: "I donated blood yesterday and they were glad to see an O negative donor.",
    5: "The new trail shoes I ordered came in my usual size.",
    10: "The vet says our cat is a healthy weight.",
    16: "My mum sent me a photo of a heron this morning.",
    17: "I still keep in touch with my old lab partner from Leeds.",
    18: "An old school friend called me Sparky at the reunion, it made me laugh.",
    19: "Gerald has a new leaf, he's thriving on that windowsill.",
    22: "I rewatched Spirited Away last night, it still makes me cry.",
}
FILLER = ("Can you suggest a quick dinner recipe?", "Here is an idea: a tomato and chickpea stew takes 25 minutes.",
          "What's a good way to stay focused while working from home?",
          "Try short blocks of work with breaks, and keep a tidy desk.")
USER = lme.USER


def own_history(seed: int) -> lme.Question:
    """A user's history of its own: 12 sessions a week apart, each two filler exchanges."""
    t0 = datetime(2024, 1, 1, 9, tzinfo=UTC)
    turns = [lme.Turn(f"s{s}-{i}", f"s{s}", "user" if i % 2 == 0 else "assistant", FILLER[i],
                      t0 + timedelta(days=7 * s, minutes=i), False) for s in range(12) for i in range(len(FILLER))]
    return lme.Question(f"own-{seed}", "probe", "", t0 + timedelta(days=120), tuple(turns))


def with_updates(q: lme.Question, seed: int) -> lme.Question:
    """``q`` with each fact (id ``f{k}-0``), its look-alike (``f{k}-1``) and its update or remark
    (``f{k}-2``) added at the end of three of its sessions in that order, each answered by a reply
    (:func:`probe_unlisted_facts.said_in_sessions`)."""
    said = [(fact, look, later) if (later := UPDATES.get(k) or REMARKS.get(k)) else None
            for k, (fact, look, _) in enumerate(FACTS)]
    return said_in_sessions(q, seed, said, lambda k, _: REPLIES[k % len(REPLIES)])


async def probe_history(q: lme.Question, settings: Settings) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jevmem-probe-") as d:
        service = EmbeddedService(settings, embedder=default_embedder(), data_dir=Path(d) / "store")
        await service.start()
        try:
            await lme.ingest(service, q)
            events: dict[str, str] = {}
            edges: set[tuple[str, str]] = set()
            for session in sorted({t.session for t in q.turns}):
                scope = Scope(tenant_id=q.tenant, conversation_id=session)
                events |= {n.id: n.event_id for n in await service.nodes(scope)}
                edges |= {(e.source, e.target) for e in await service.edges(scope) if e.label == SUPERSEDES}
            named = {(events.get(a, a), events.get(b, b)) for a, b in edges}
            flagged = {old for _, old in named}
            for k, (_, _, question) in enumerate(FACTS):
                if k not in UPDATES and k not in REMARKS:
                    continue
                res = await service_api.recall_across(service, q.tenant, question, 10, None, user_id=USER)
                ranked = [e.event_id for e in res.evidence]
                row: dict[str, Any] = {"history": q.question_id, "question": question, "top": ranked[:1]}
                if k in UPDATES:
                    row |= {"kind": "update", "stale_flagged": (f"f{k}-2", f"f{k}-0") in named,
                            "current_first": ranked[:1] == [f"f{k}-2"]}
                else:
                    row |= {"kind": "stable", "wrongly_flagged": f"f{k}-0" in flagged,
                            "first": ranked[:1] == [f"f{k}-0"]}
                rows.append(row)
        finally:
            await service.stop()
    return rows


def _share(rows: list[dict[str, Any]], key: str) -> float:
    got = [r[key] for r in rows if key in r]
    return round(sum(got) / len(got), 3) if got else 0.0


async def probe(directory: Path | None, haystacks: int, params: Params) -> dict[str, Any]:
    histories = ([with_updates(lme.load_question(p), i)
                  for i, p in enumerate(sorted(directory.glob("*.json"))[::10][:haystacks])]
                 if directory is not None else [with_updates(own_history(0), 0)])
    rows: list[dict[str, Any]] = []
    for h in histories:
        rows += await probe_history(h, Settings(params=params))
    return {"histories": len(histories), "updates": sum(r["kind"] == "update" for r in rows),
            "stable": sum(r["kind"] == "stable" for r in rows),
            "stale_flagged": _share(rows, "stale_flagged"), "current_first": _share(rows, "current_first"),
            "stable_wrongly_flagged": _share(rows, "wrongly_flagged"), "stable_first": _share(rows, "first"),
            "misses": [r for r in rows if not (r.get("stale_flagged", True) and r.get("current_first", True)
                                               and not r.get("wrongly_flagged", False) and r.get("first", True))]}


def main(argv: list[str]) -> int:
    return run(argv, __doc__ or "", probe, 1, need_directory=False)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
