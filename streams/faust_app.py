"""The Faust app: thin agents over the shared stages (decode -> stage -> emit/sink).

    observations --typing--> memories --linking--> candidates --relations--> judgments, edges
                     |                    |  (materialise nodes,        |  (materialise edges,
                     v                    |   then discover)            |   consolidate every 20)
                deadletters               v                             v
                                     vector/lexical/node stores      edge store, consolidation

* ``typing`` micro-batches with ``take_events(batch, within)`` so one embedding call and one
  System One request serve a whole batch. It assigns each event its per-conversation ``seq`` from
  the ``jevmem-seq`` table (the conversation's write counter; changelog-backed, partitioned like
  the source so it moves with the partition on rebalance).
* ``linking`` materialises the nodes (acknowledged) *before* discovering candidates, and a
  conversation lives on one partition, so discovery sees every earlier observation
  (read-your-writes), and a replay sees exactly what the first run saw (``seq`` filters).
* ``relations`` judges all pairs of a batch in one request, writes edges to the edge store, emits
  them, and runs consolidation when a node's seq completes a block of ``consolidate_every`` writes.

Events are acknowledged (and so their offsets committed) only after the batch's writes and
sends were acknowledged: at-least-once delivery into idempotent, id-keyed upserts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import faust

from streams.embedded import Stores, dead_letter
from topology.errors import InvalidEvent
from topology.pipeline import WritePath, consolidation_runs
from topology.schemas import CandidateSet, EdgeEvent, MemoryNode, Observation, Scope, decode, encode
from topology.topics import topics

log = logging.getLogger("jevmem.streams")

#: Event ids remembered per conversation to give redelivered events their original seq.
RECENT_EVENTS = 4096


@dataclass
class AppConfig:
    broker: str = "kafka://127.0.0.1:9092"
    app_id: str = "jevmem"
    prefix: str = "jevmem"
    partitions: int = 4
    batch: int = 64
    within_s: float = 0.5
    store: str = "memory://"
    web_port: int = 6066
    datadir: str = ".jevmem/worker"


@dataclass
class Services:
    """What the agents call: the write path and the stores it materialises into."""

    write_path: WritePath
    stores: Stores


def assign(table_value: dict[str, Any] | None, event_id: str) -> tuple[int, dict[str, Any]]:
    """Pure seq assignment for one event given the conversation's table value.

    Returns (seq, new table value). A known event keeps its seq; a new one takes ``next``.
    """
    nxt = 0 if table_value is None else int(table_value["next"])
    recent: dict[str, int] = {} if table_value is None else {k: int(v) for k, v in table_value["recent"].items()}
    if event_id in recent:
        return recent[event_id], {"next": nxt, "recent": recent}
    recent[event_id] = nxt
    if len(recent) > RECENT_EVENTS:
        for old in sorted(recent, key=recent.__getitem__)[: len(recent) - RECENT_EVENTS]:
            del recent[old]
    return nxt, {"next": nxt + 1, "recent": recent}


async def _send_all(topic: faust.TopicT, records: Sequence[tuple[str, bytes]]) -> None:
    """Send and wait until the broker acknowledged every record."""
    futures = [await topic.send(key=key.encode(), value=value) for key, value in records]
    await asyncio.gather(*futures)


def create_app(config: AppConfig, services: Services) -> faust.App:
    app = faust.App(
        config.app_id,
        broker=config.broker,
        store=config.store,
        topic_partitions=config.partitions,
        topic_replication_factor=1,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        web_port=config.web_port,
        datadir=config.datadir,
        web_enabled=False,
        broker_commit_every=256,
        broker_commit_interval=1.0,
        # a dead worker's partitions move within ~10 s instead of the 60 s default
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        stream_wait_empty=False,
        # no standby table replicas: promoting a standby after a member died sometimes left the
        # taken-over partitions unfetched (faust-streaming 0.15); active-only recovery does not
        table_standby_replicas=0,
    )
    spec = topics(config.prefix)

    def topic(role: str) -> faust.TopicT:
        s = spec[role]
        return app.topic(s.name, key_serializer="raw", value_serializer="raw", partitions=config.partitions,
                         retention=None if s.retention_ms < 0 else s.retention_ms / 1000.0,
                         config=s.config())

    observations, memories, candidates = topic("observations"), topic("memories"), topic("candidates")
    judgments, edges, consolidation, deadletters = (
        topic("judgments"), topic("edges"), topic("consolidation"), topic("deadletters"))
    seqs = app.Table(f"{config.app_id}-seq", default=None, partitions=config.partitions,
                     use_partitioner=True)  # app defaults: raw keys (as the producer's), json values
    wp, stores = services.write_path, services.stores

    @app.agent(observations)
    async def typing_agent(stream: faust.StreamT[bytes]) -> AsyncIterator[None]:
        async for events in stream.take_events(config.batch, within=config.within_s):  # type: ignore[attr-defined]
            good: list[tuple[Observation, int]] = []
            letters = []
            seen: set[tuple[str, str]] = set()
            for ev in events:
                msg = ev.message
                try:
                    obs = decode(Observation, ev.value)
                except InvalidEvent as exc:
                    letters.append(dead_letter(ev.value, exc.reason, f"{msg.topic}:{msg.partition}:{msg.offset}"))
                    continue
                if (obs.scope.key, obs.event_id) in seen:
                    continue
                seen.add((obs.scope.key, obs.event_id))
                key = obs.scope.key
                seq, state = assign(seqs.get(key), obs.event_id)
                seqs[key] = state
                good.append((obs, seq))
            nodes = await wp.build_nodes(good)
            await _send_all(memories, [(n.scope.key, encode(n)) for n in nodes])
            await _send_all(deadletters, [("rejected", encode(d)) for d in letters])
            for d in letters:
                log.warning("dead letter %s: %s", d.source, d.reason)
            yield None

    @app.agent(memories)
    async def linking_agent(stream: faust.StreamT[bytes]) -> AsyncIterator[None]:
        async for values in stream.take(config.batch, within=config.within_s):
            nodes = [decode(MemoryNode, v) for v in values]
            await stores.materialise(nodes)
            csets = await wp.discover(nodes)  # derived nodes are materialised, not linked
            await _send_all(candidates, [(c.node.scope.key, encode(c)) for c in csets])
            yield None

    @app.agent(candidates)
    async def relations_agent(stream: faust.StreamT[bytes]) -> AsyncIterator[None]:
        async for values in stream.take(config.batch, within=config.within_s):
            csets = [decode(CandidateSet, v) for v in values]
            found, new_edges = await wp.judge(csets)
            await stores.edges.upsert(new_edges)
            await _send_all(judgments, [(j_scope(j.tenant_id, j.conversation_id), encode(j)) for j in found])
            await _send_all(edges, [(j_scope(e.tenant_id, e.conversation_id), encode(e)) for e in new_edges])
            for scope, run, last in consolidation_runs([c.node for c in csets], wp.params.consolidate_every):
                decisions, links, derived = await wp.consolidate(scope, run, last, _neighbours(stores))
                if derived:
                    built = await wp.build_nodes_from(derived)
                    await stores.materialise(built)
                    await _send_all(memories, [(n.scope.key, encode(n)) for n in built])
                await stores.edges.upsert_decisions(decisions)
                await stores.edges.upsert(links)
                await _send_all(consolidation, [(scope.key, encode(d)) for d in decisions])
                await _send_all(edges, [(scope.key, encode(e)) for e in links])
            yield None

    @app.task  # type: ignore[untyped-decorator]
    async def dump_on_sigusr2() -> None:
        """``kill -USR2 <worker>`` logs every asyncio task's stack (diagnosing a stalled worker)."""
        import io
        import signal

        def dump() -> None:
            buf = io.StringIO()
            for task in asyncio.all_tasks():
                task.print_stack(file=buf)
            log.warning("task dump:\n%s", buf.getvalue())

        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, dump)

    app.jevmem_agents = (typing_agent, linking_agent, relations_agent)  # type: ignore[attr-defined]
    return app


def j_scope(tenant_id: str, conversation_id: str) -> str:
    return Scope(tenant_id=tenant_id, conversation_id=conversation_id).key


def _neighbours(stores: Stores) -> Any:
    async def fetch(scope: Scope, ids: Sequence[str]) -> list[EdgeEvent]:
        return await stores.edges.neighbours(scope, ids, ["semantic"], 10_000)

    return fetch
