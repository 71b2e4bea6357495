"""The ``poison`` fault of ``jevmem bench chaos``: records that deterministically fail one stage,
mixed into the stream.

The round's workers (and the embedded reference run) take their embeddings from
:func:`refusing_service`, an HTTP server on loopback that speaks OpenAI's ``/v1/embeddings`` and
embeds each text with the configured in-process model (one text at a time: the same vectors in
any batch), except that it refuses, with HTTP 400 as hosted APIs refuse an input, every request
holding a text that names :data:`POISON`. :func:`poisoned` mixes poison observations (new event
ids, the marker in their text) into the stream at random places. The round passes when, besides
the usual checks against the embedded run *without* the poison records (every other record
exactly once, seqs ``0..n-1``, the same graph), every poison record is exactly one dead letter
whose reason names the refusal (:func:`letter_problems`), and no pause between two batches the
workers wrote is longer than :data:`MAX_PAUSE_S`.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from jevmem import assembly
from jevmem.settings import Settings
from streams.kafka_admin import read_topic
from topology.ports import Embedder
from topology.schemas import DeadLetter, Observation, decode
from topology.topics import topics

#: The text that makes the embedding service refuse a request.
POISON = "jevmem-poison-pill"
#: Poison records per conversation.
PER_CONVERSATION = 2
#: The longest pause between two batches a poison round allows: isolating a poison record takes
#: a few partial attempts (about a second), far less than a retried outage's back-off.
MAX_PAUSE_S = 8.0
#: The model name the workers are configured with (``openai:<MODEL>``): the store records it.
MODEL = "poison-proxy"


def poisoned(obs: Sequence[Observation], rng: random.Random, per_conversation: int = PER_CONVERSATION,
             ) -> tuple[list[Observation], list[Observation]]:
    """(the stream: ``obs`` with poison observations inserted at random places of each
    conversation, each conversation's order kept; the poison observations)."""
    out, poison = list(obs), []
    for conversation in dict.fromkeys(o.conversation_id for o in obs):
        places = [i for i, o in enumerate(out) if o.conversation_id == conversation]
        for k in range(per_conversation):
            at = rng.choice(places)
            base = out[at]
            bad = base.model_copy(update={"event_id": f"poison-{k}-{base.event_id}",
                                          "content": f"{base.content} {POISON}"})
            out.insert(at, bad)
            poison.append(bad)
            places = [i for i, o in enumerate(out) if o.conversation_id == conversation]
    return out, poison


def settings_for(settings: Settings, url: str, dim: int) -> Settings:
    """``settings`` with the workers' embeddings taken from :func:`refusing_service` at ``url``."""
    return settings.model_copy(update={"embedder": f"openai:{MODEL}:{dim}", "embedding_url": url})


@contextmanager
def refusing_service(embedder: Embedder) -> Iterator[str]:
    """Serve ``/v1/embeddings`` over ``embedder`` on a free loopback port (a thread); yields the
    base URL (``http://127.0.0.1:<port>/v1``). A request naming :data:`POISON` is refused (400)."""
    app = FastAPI()
    lock = threading.Lock()

    @app.post("/v1/embeddings")
    def embeddings(body: dict[str, Any]) -> Any:
        texts = [str(t) for t in body["input"]]
        if any(POISON in t for t in texts):
            return JSONResponse({"error": {"message": "input refused", "type": "invalid_request_error"}}, status_code=400)
        with lock:  # one inference at a time: the bench's own process shares the cores
            vectors = embedder.embed(texts)
        return {"object": "list", "model": body.get("model"),
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]}

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True, name="poison-embeddings")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the poison embedding service did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)


#: How long the round waits for the last dead letters once every other record is written (a
#: batch's dead letters are published after the rest of it is written).
LETTERS_WAIT_S = 30.0


async def round_problems(settings: Settings, poison: Sequence[Observation], max_gap_s: float,
                         worker_logs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(what is wrong with a poison round, notes) once every other record is written: the dead
    letters (:func:`letter_problems`, read again until they are right or :data:`LETTERS_WAIT_S`
    passed); a batch retried for an error that is not transient, or for the refusal itself (a poison record held
    its partition); a pause longer than :data:`MAX_PAUSE_S` that no retried transient failure
    explains. Retried transient failures (a store's hiccup) are notes: retrying them is the
    stream's contract, not a poison record's doing."""
    deadline = time.monotonic() + LETTERS_WAIT_S
    problems = await asyncio.to_thread(letter_problems, settings, poison)
    while problems and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        problems = await asyncio.to_thread(letter_problems, settings, poison)
    retries = [line for log in worker_logs for line in log.splitlines() if "failed (attempt" in line]
    held = [r for r in retries if ", transient)" not in r or "EmbeddingRefused" in r or POISON in r]
    if held:
        problems.append(f"{len(held)} batch attempts failed on a poison record and were retried (it held its partition)")
    notes = [f"{len(retries) - len(held)} batch attempts failed transiently and were retried"] if len(retries) > len(held) else []
    if max_gap_s > MAX_PAUSE_S and len(retries) == len(held):
        problems.append(f"a pause of {max_gap_s} s between batches (at most {MAX_PAUSE_S})")
    return problems, notes


def letter_problems(settings: Settings, poison: Sequence[Observation]) -> list[str]:
    """What is wrong with the round's dead letters: each poison record must be exactly one letter
    whose reason names the refusal and the stage, and no other record a letter (records are told
    apart by conversation and event: event ids repeat across conversations)."""
    letters = [decode(DeadLetter, r.value)
               for r in read_topic(assembly.kafka(settings), topics(settings.topic_prefix)["deadletters"].name)]
    per_event = Counter((d.conversation_id, d.event_id) for d in letters)
    problems = []
    for o in poison:
        n = per_event.pop((o.conversation_id, o.event_id), 0)
        if n != 1:
            problems.append(f"poison {o.conversation_id}/{o.event_id}: {n} dead letters")
    poisoned_events = {(o.conversation_id, o.event_id) for o in poison}
    for d in letters:
        if (d.conversation_id, d.event_id) in poisoned_events and not ("EmbeddingRefused" in d.reason and "embed" in d.reason):
            problems.append(f"dead letter {d.source} does not name its cause: {d.reason[:200]}")
    problems += [f"unexpected dead letter for {c}/{e}" for c, e in per_event]
    return problems
