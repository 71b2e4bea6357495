"""Stable facts of attributes in none of our tables, each beside a look-alike, inside real histories.

    python scripts/probe_unlisted_facts.py LONGMEMEVAL_DIR [--haystacks 3] [--params JSON]

For each of the first ``--haystacks`` LongMemEval question files (sorted by name, every tenth),
the haystack's ~50 sessions (user and assistant turns, ~500) are one user's memory, and 24 facts
of attributes no generator or model of ours names (a football team, a dentist, a blood type, a
sister's city, ...) are added to it as the user's turns, each answered by a short assistant reply:
the fact in one session, a look-alike the user reports of someone else ("My friend Ines is
learning Italian") in a later one, and the user's own question about it ("What language am I
learning again?") in a later one still. Each fact is then asked in the first person through the
recall users call (``user_id``, as of the question's date, top 50), and beside it plain dense
search over the same turns (each embedded alone, cosine). Reported as JSON, for both: the stating
turn first, above its look-alike, and in the top 10, with the misses listed. About 3 minutes a
haystack on two cores. The facts are a check written apart from every table a model was trained
or benchmarked on; they are not tuned to.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from jevmem.bench import longmemeval as lme
from jevmem.bench.dense import dense_order
from jevmem.settings import Settings
from jevmem.wiring import EmbeddedService
from query_api import service as service_api
from topology.embedding import default_embedder
from topology.params import Params
from topology.ports import Embedder

#: (the user's fact, their report of someone else's look-alike, the question in the first person)
FACTS: tuple[tuple[str, str, str], ...] = (
    ("I've supported Celtic since I was a kid.", "My flatmate Rosa supports Rangers, sadly.",
     "What football team do I support?"),
    ("I play the cello in a community orchestra.", "My cousin Sam plays the trumpet.", "What instrument do I play?"),
    ("My dentist is Dr Okafor on Mill Street.", "My colleague Ben sees Dr Hale for his teeth.", "Who is my dentist?"),
    ("My favourite tea is a smoky lapsang souchong.", "My friend Jules loves green tea.", "What is my favourite tea?"),
    ("My blood type is O negative.", "My brother's blood type is A positive.", "What's my blood type?"),
    ("I wear a size 42 in running shoes.", "My friend Leo wears a size 45.", "What shoe size do I wear?"),
    ("I bank with Monzo.", "My dad still banks with Barclays.", "Which bank am I with?"),
    ("My favourite author is Ursula Le Guin.", "My colleague Dana loves Stephen King.", "Who is my favourite author?"),
    ("I get my hair cut at Snips on King Street.", "My mum goes to a salon called Curl Up.",
     "Where do I get my hair cut?"),
    ("I always order an oat flat white.", "My partner Alex drinks double espressos.", "What's my usual coffee order?"),
    ("Our cat sees Dr Mensah at the Riverside vet clinic.", "My neighbour takes her dog to Paws and Co.",
     "Which vet does my cat go to?"),
    ("I'm learning Japanese in the evenings.", "My friend Ines is learning Italian.", "What language am I learning?"),
    ("My favourite band is Radiohead.", "My flatmate is obsessed with Coldplay.", "What's my favourite band?"),
    ("My favourite board game is Catan.", "My brother Theo loves Ticket to Ride.", "What's my favourite board game?"),
    ("My sister Lena lives in Berlin.", "My friend Marta's sister lives in Vienna.", "Where does my sister live?"),
    ("My brother Tom works as a paramedic.", "My colleague Raj's brother is an architect.", "What does my brother do?"),
    ("My mum spends every weekend birdwatching.", "My friend Chloe's mum does pottery.", "What's my mum's hobby?"),
    ("I studied chemistry at the University of Leeds.", "My friend Oscar studied law at Durham.",
     "Where did I go to university?"),
    ("Growing up everyone called me Sparky.", "My cousin Ben's nickname was Moose.", "What was my childhood nickname?"),
    ("I keep a fiddle-leaf fig called Gerald on my windowsill.", "My neighbour Ruth grows tomatoes on her balcony.",
     "What plant do I have?"),
    ("I ride a steel Surly commuter bike.", "My housemate rides a Brompton.", "What bike do I ride?"),
    ("I run 10k every Sunday morning.", "My friend Noor runs half marathons.", "How far do I run on Sundays?"),
    ("My favourite film is Spirited Away.", "My boyfriend's favourite film is Heat.", "What's my favourite film?"),
    ("I listen to the Hardcore History podcast on my commute.", "My sister listens to true crime podcasts.",
     "What podcast do I listen to?"),
)
REPLIES = ("Thanks for sharing that!", "Good to know, I'll keep that in mind.", "That sounds nice.")
LOOK_BACK = "Let me look back at what you told me."


def said_in_sessions(q: lme.Question, seed: int, said: Sequence[tuple[str, str, str] | None],
                     reply: Callable[[int, int], str]) -> lme.Question:
    """``q`` with, for each ``k`` whose ``said[k]`` is not None, its three user turns added in
    that order at the end of three of its sessions (chosen by ``seed``, in time order), ids
    ``f{k}-0``, ``f{k}-1``, ``f{k}-2``, each answered by ``reply(k, j)`` (id ``f{k}-{j}r``)."""
    rng = random.Random(seed)
    ends: dict[str, Any] = {}
    for t in q.turns:
        ends[t.session] = max(ends.get(t.session, t.at), t.at)
    sessions = sorted(ends, key=lambda s: ends[s])
    turns = list(q.turns)
    for k, texts in enumerate(said):
        if texts is None:
            continue
        chosen = sorted(rng.sample(range(len(sessions) - 1), 3))
        for j, (i, text) in enumerate(zip(chosen, texts, strict=True)):
            at = ends[sessions[i]] + timedelta(seconds=10 * (k + 1))
            turns.append(lme.Turn(f"f{k}-{j}", sessions[i], "user", text, at, False))
            turns.append(lme.Turn(f"f{k}-{j}r", sessions[i], "assistant", reply(k, j), at + timedelta(seconds=5), False))
    return replace(q, turns=tuple(sorted(turns, key=lambda t: t.at)))


def with_facts(q: lme.Question, seed: int) -> lme.Question:
    """``q`` with each fact, its look-alike and the user's question about it added, in that order,
    at the end of three of its sessions (:func:`said_in_sessions`); ids ``f{k}-0`` (the fact),
    ``f{k}-1`` (the look-alike), ``f{k}-2`` (the question)."""
    return said_in_sessions(q, seed, [(fact, look, question.rstrip("?") + " again?") for fact, look, question in FACTS],
                            lambda k, j: LOOK_BACK if j == 2 else REPLIES[k % len(REPLIES)])


def placed(ranking: list[str], k: int) -> dict[str, Any]:
    """Where fact ``k``'s stating turn ranks in ``ranking``, and against its look-alike."""
    rank = ranking.index(f"f{k}-0") if f"f{k}-0" in ranking else len(ranking)
    look = ranking.index(f"f{k}-1") if f"f{k}-1" in ranking else len(ranking)
    return {"first": rank == 0, "above_look_alike": rank < look, "top10": rank < 10, "rank": rank}


async def probe_haystack(q: lme.Question, settings: Settings, embedder: Embedder) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jevmem-probe-") as d:
        service = EmbeddedService(settings, embedder=embedder, data_dir=Path(d) / "store")
        await service.start()
        try:
            await lme.ingest(service, q)
            plain = np.asarray(embedder.embed([t.content for t in q.turns]), dtype=np.float32)
            turn_ids = [t.event_id for t in q.turns]
            for k, (_, _, question) in enumerate(FACTS):
                res = await service_api.recall_across(service, q.tenant, question, lme.DEPTH, None,
                                                      user_id=lme.USER, as_of=q.as_of)
                dense = dense_order(plain, embedder.embed_query([question])[0], turn_ids, lme.DEPTH)
                rows.append({"haystack": q.question_id, "question": question,
                             "jevmem": placed([e.event_id for e in res.evidence], k), "dense": placed(dense, k)})
        finally:
            await service.stop()
    return rows


async def probe(directory: Path, haystacks: int, params: Params) -> dict[str, Any]:
    embedder = default_embedder()
    paths = sorted(directory.glob("*.json"))[::10][:haystacks]
    rows: list[dict[str, Any]] = []
    for i, path in enumerate(paths):
        rows += await probe_haystack(with_facts(lme.load_question(path), i), Settings(params=params), embedder)
    share = {m: {key: round(sum(r[m][key] for r in rows) / len(rows), 3) for key in ("first", "above_look_alike", "top10")}
             for m in ("jevmem", "dense")}
    misses = [{"haystack": r["haystack"], "question": r["question"], "jevmem_rank": r["jevmem"]["rank"],
               "dense_rank": r["dense"]["rank"]} for r in rows if not r["jevmem"]["first"]]
    return {"questions": len(rows), "haystacks": len(paths), **share, "jevmem_not_first": misses}


def run(argv: list[str], doc: str, probe: Callable[[Any, int, Params], Awaitable[dict[str, Any]]],
        haystacks: int, need_directory: bool = True) -> int:
    """The command line of a probe: ``LONGMEMEVAL_DIR`` (optional unless ``need_directory``),
    ``--haystacks`` (default ``haystacks``), ``--params`` (Params fields as JSON); prints
    ``probe``'s report as JSON."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("directory", type=Path, **({} if need_directory else {"nargs": "?", "default": None}))
    ap.add_argument("--haystacks", type=int, default=haystacks)
    ap.add_argument("--params", default="{}", help="Params fields as JSON (e.g. {\"realm\": {\"first_person\": false}})")
    args = ap.parse_args(argv)
    params = Params.model_validate(orjson.loads(args.params))
    sys.stdout.buffer.write(orjson.dumps(asyncio.run(probe(args.directory, args.haystacks, params)),
                                         option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def main(argv: list[str]) -> int:
    return run(argv, __doc__ or "", probe, 3)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
