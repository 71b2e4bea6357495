"""The steps of a query that read what is still true and whose fact a memory states, after
its pool is scored: someone else's fact falls (:meth:`PresentSteps._subjects`), a person's turn
gains from the reply to it (:meth:`PresentSteps._exchanges`), a superseded memory ranks below its
replacement (:meth:`PresentSteps._currency`), and for a question about the present the latest
of a person's statements about what it asks ranks first (:meth:`PresentSteps._latest`).
:class:`~query_api.retrieval.controller.RetrievalController` runs them in that order."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from query_api.retrieval import currency, formulas, subjects
from query_api.retrieval.nodeinfo import NodeInfo
from query_api.retrieval.reach import Reach
from query_api.retrieval.state import Cand, Run
from topology.params import Params
from topology.schemas import CandidateFeatures, MemoryNode
from topology.stages.relations import relation_state
from topology.stages.updates import MIN_ABOUT, PERSON_ROLES
from topology.systemone.attributes import AttributeSpace, before_rows
from topology.systemone.catalog import RELATION, SCORE
from topology.systemone.port import Item
from topology.systemone.turn_kinds import ASSISTANT_ROLES
from topology.systemone.update_model import sentences


class PresentSteps:
    """The steps above, for a controller that has ``params``, an attribute space
    (:meth:`attributes`), and fetches (:meth:`_fetch`) and scores (:meth:`_score`) pool members."""

    params: Params

    def attributes(self) -> AttributeSpace:
        raise NotImplementedError

    async def _fetch(self, reach: Reach, ids: Sequence[str], edges_next: bool = False) -> list[tuple[MemoryNode, NodeInfo]]:
        raise NotImplementedError

    async def _score(self, run: Run, cands: Sequence[Cand]) -> None:
        raise NotImplementedError

    def _subjects(self, run: Run, question: str) -> None:
        """A memory that states someone else's fact, when the question asks about people of the
        pool (:mod:`query_api.retrieval.subjects`), keeps ``1 - params.hearsay_penalty`` of its
        score when one of the asked people said it (their words about someone else), else
        ``1 - params.other_subject_penalty`` (another speaker's fact)."""
        other, hearsay = self.params.other_subject_penalty, self.params.hearsay_penalty
        pool = run.st.pool.values()
        run.asked = asked = subjects.asked_people(question, {c.node.speaker or "" for c in pool})
        persons_only = not asked and run.realm and self.params.realm.first_person
        if persons_only:
            run.asker = asked = subjects.the_asker(question, [c.node for c in pool])
        if not asked or not (other or hearsay):
            return
        for c in pool:
            if persons_only and c.node.role.lower() not in PERSON_ROLES:
                continue  # an assistant's or a tool's turn states no one's fact of its own
            if subjects.about_someone_else(c.node, asked, question):
                c.score *= 1.0 - (hearsay if (c.node.speaker or "").lower() in asked else other)

    def _exchanges(self, run: Run) -> None:
        """In a realm, a person's turn (a role of ``PERSON_ROLES``) whose reply (the next turn of
        its conversation, by an ``ASSISTANT_ROLES`` role) is in the pool gains
        ``RealmRanking.exchange_weight`` of the reply's score (:func:`formulas.exchange_lift`;
        every lift read from the scores before any is added). Not when the question asks what
        the reply's role said (``asked_roles``): then the reply is the memory asked for."""
        weight = self.params.realm.exchange_weight
        if not run.realm or weight <= 0.0:
            return
        st = run.st
        lifts: dict[str, float] = {}
        for c in st.pool.values():
            if c.node.role.lower() not in PERSON_ROLES:
                continue
            reply = st.by_seq.get((c.node.conversation_id, c.node.seq + 1))
            if reply is None:
                continue
            role = reply.node.role.lower()
            if role in ASSISTANT_ROLES and role not in st.roles:
                lifts[c.node.id] = formulas.exchange_lift(c.score, reply.score, weight)
        for nid, score in lifts.items():
            st.pool[nid].score = score

    async def _latest(self, reach: Reach, run: Run) -> None:
        """For a question about the present naming people of the pool: the latest of a named
        person's own statements about what it asks ranks first; a memory already superseded by
        an edge takes no part. What it asks: the attribute the learned attribute model reads the
        question as about (:meth:`_asked_attribute`); the person's latest statement about it
        joins the pool when missing (:meth:`_join_latest`), and the latest of those in the pool
        ranks first of the person's statements, or of the whole pool with ``params.latest_alone``
        (:meth:`_about`, :func:`query_api.retrieval.currency.latest_about`). Failing that, the statements that
        answer it about as well as the best one (:func:`query_api.retrieval.currency.latest_first`,
        ``params.latest_band``). A question in the first person that names nobody
        (``run.asker``) takes :meth:`_judged_latest` instead."""
        st = run.st
        if not (run.asked or run.asker) or not currency.about_the_present(st.route, st.question):
            return
        if not run.asked:
            await self._judged_latest(reach, run)
            return
        attribute = self._asked_attribute(run)
        if attribute is not None:
            await self._join_latest(reach, run, attribute)
        pool = _statements(run, run.asked)
        own = [i for i, s in pool.items() if s.own]
        alone = self.params.latest_alone and currency.asks_value(st.question)
        about = await self._about(reach, run, own, attribute) if attribute is not None and len(own) > (0 if alone else 1) \
            else []
        scores = currency.latest_about(pool, about, alone)
        if scores is None and self.params.latest_band <= 1.0:
            scores = currency.latest_first(pool, self.params.latest_band)
        for i, s in (scores or {}).items():
            st.pool[i].score = s

    async def _judged_latest(self, reach: Reach, run: Run) -> None:
        """For a question in the first person about the present (``run.asker``): of the asker's
        own statements answering it about as well as the best one (``params.latest_band``) and
        sharing a content word with it (:attr:`~query_api.retrieval.nodeinfo.NodeInfo.content_tokens`),
        the latest that the update judge reads as replacing the best one with probability
        ``RealmRanking.judged_update`` or more ranks first (None: off)
        (:func:`query_api.retrieval.currency.judged_latest`). The judge gets the attribute
        model's overlap where that model knows one of the two statements' attribute, else the
        attribute unknown (:meth:`_overlaps`), and reads whether the newer changes what the older
        stated; the question goes with each pair, so the words it asks with ("favourite band")
        are read as what both statements are about, not as a value the newer one keeps
        (:func:`topology.systemone.update_model.update_features`). Answering the question about
        as well is weak evidence that the two are about one
        thing: told nothing of the attribute, the judge reads about half of the pairs of two
        different attributes as changes, and in a user's thousands of turns small talk answers a
        question about as well as a stated fact ("I've been trying to drink more water lately."
        for "Which allergy do I have?"); a shared word of substance is asked for as well. Only
        statements of one sentence take part: the judge was validated on such pairs
        (``scripts/choose_judged_update.py``), and on two long chat turns it is sure of changes
        that are not there; the order of those is left to relevance."""
        st, realm = run.st, self.params.realm
        if realm.judged_update is None or self.params.latest_band > 1.0:
            return
        pool = _statements(run, run.asker, one_sentence=True)
        later = currency.said_after_best(pool, self.params.latest_band)
        if later is None:
            return
        best, newer = later
        old = st.pool[best]
        # two statements about one thing share a word of substance ("coffee", "dentist"): small
        # talk that answers the question about as well shares none with the fact
        newer = [i for i in newer if st.pool[i].info.content_tokens & old.info.content_tokens]
        if not newer:
            return
        if run.so.calls + run.so.requests_for([len(RELATION.questions)] * len(newer)) > self.params.limits.controller_calls:
            return
        overlaps = await self._overlaps(reach, run, best, newer)
        items = [Item(RELATION, relation_state(
            st.pool[i].node, old.node,
            CandidateFeatures(cosine=round(float(np.dot(st.pool[i].info.row, old.info.row)), 6), lexical=0.0,
                              entity=0.0, temporal=0.0),
            overlap, st.question)) for i, overlap in zip(newer, overlaps, strict=True)]
        answers = await run.so.ask(items)
        judged = [i for i, a in zip(newer, answers, strict=True) if a.p("updates") >= realm.judged_update]
        for i, s in currency.judged_latest(pool, best, judged).items():
            st.pool[i].score = s

    async def _overlaps(self, reach: Reach, run: Run, best: str, newer: Sequence[str]) -> list[float | None]:
        """For each of ``newer`` (pool ids), how far it and ``best`` are about one attribute, as
        the update judge reads it at write: the overlap of the learned attribute model's readings
        (:meth:`_known`) when the model reads either of the two as an attribute it knows (at least
        :data:`~topology.stages.updates.MIN_ABOUT`: "I've been trying to drink more water" is
        not about "I'm allergic to peanuts"), else None (unknown: the overlap of two readings of
        attributes it does not know is noise). All None without a learned model."""
        if self.attributes().learned is None:
            return [None] * len(newer)
        pool = run.st.pool
        read = await self._known(reach, run, {i: (pool[i].node, pool[i].info) for i in [best, *newer]})
        best_known = float(read[0].max(initial=0.0))
        return [round(float(read[0] @ row), 4) if max(best_known, float(row.max(initial=0.0))) >= MIN_ABOUT else None
                for row in read[1:]]

    def _asked_attribute(self, run: Run) -> int | None:
        """The attribute (column of :meth:`~topology.systemone.attributes.AttributeSpace.known`)
        the learned attribute model reads the question as about with probability
        ``params.latest_attribute`` or more; None without a learned model, or when it reads the
        question as about no one attribute."""
        gate, asked = self.params.latest_attribute, run.st.asked
        if gate > 1.0 or not asked.size:
            return None
        known = self.attributes().known(asked[None, :])
        if known is None or not known.shape[1] or float(known[0].max()) < gate:
            return None
        return int(known[0].argmax())

    async def _join_latest(self, reach: Reach, run: Run, attribute: int) -> None:
        """The asked person's latest own statement about ``attribute`` among the
        ``params.anchor_pool`` memories nearest to the question moved towards that attribute
        (:meth:`~topology.systemone.attributes.AttributeSpace.towards` by ``params.latest_steer``),
        read as :meth:`_about` reads them, joins the pool when it is not in it (scored in one
        request, when the controller-call budget allows; also into a pool already holding
        ``limits.visited_nodes``, which it then exceeds by this one memory): a statement whose
        words the question does not share ("Dana approved my leave request today") is then ranked
        by :meth:`_about` like the others."""
        p, st = self.params, run.st
        if run.so.calls + run.so.requests_for([len(SCORE.questions)]) > p.limits.controller_calls:
            return
        space = self.attributes()
        query = space.towards(st.asked[None, :], attribute, p.latest_steer)[0]
        hits = await reach.vectors([float(x) for x in query], p.anchor_pool)
        found = [(n, info) for n, info in await self._fetch(reach, [h.id for h in hits if h.id not in st.pool])
                 if currency.recallable(n, run.as_of) and subjects.own_statement(n, run.asked)]
        if not found:
            return
        read = await self._known(reach, run, {n.id: (n, info) for n, info in found})
        about = [(n, info) for (n, info), q in zip(found, read[:, attribute], strict=True) if q >= p.latest_attribute]
        if not about:
            return
        n, info = max(about, key=lambda m: (m[0].observed_at or datetime.min.replace(tzinfo=UTC), m[0].seq, m[0].id))
        joining = Cand(n, info, "attribute", 1.0, 0.0)
        st.pool[n.id] = joining
        st.by_seq.setdefault((n.conversation_id, n.seq), joining)
        await self._score(run, [joining])

    async def _about(self, reach: Reach, run: Run, own: Sequence[str], attribute: int) -> list[str]:
        """Those of ``own`` (pool ids) that the learned attribute model reads as about
        ``attribute`` with probability ``params.latest_attribute`` or more."""
        pool = run.st.pool
        read = await self._known(reach, run, {i: (pool[i].node, pool[i].info) for i in own})
        return [i for i, p in zip(own, read[:, attribute], strict=True) if p >= self.params.latest_attribute]

    async def _known(self, reach: Reach, run: Run, nodes: dict[str, tuple[MemoryNode, NodeInfo]]) -> np.ndarray:
        """The learned attribute model's reading of ``nodes`` (id -> node and info; rows in that
        order, :meth:`~topology.systemone.attributes.AttributeSpace.known`), each node read once a
        query. A memory is read after the turn its vector was read after (``MemoryNode.after``),
        as the write path reads it; those turns not in the pool are read from the store at once."""
        space, pool, reads = self.attributes(), run.st.pool, run.st.attribute_reads
        new = {i: v for i, v in nodes.items() if i not in reads}
        if new:
            rows = np.stack([info.row for _, info in new.values()]).astype(np.float32)
            before = None
            if space.reads_before:
                wanted = {a for n, _ in new.values() if (a := n.after)}
                found = {i: pool[i].info.row for i in wanted if i in pool}
                found |= {i: nodes[i][1].row for i in wanted if i in nodes and i not in found}
                if missing := sorted(wanted - set(found)):
                    found |= {n.id: info.row for n, info in await self._fetch(reach, missing)}
                before = before_rows([n.after or "" for n, _ in new.values()], found, rows.shape[1])
            read = space.known(rows, before)
            assert read is not None
            reads.update(zip(new, read, strict=True))
        return np.stack([reads[i] for i in nodes])

    async def _currency(self, reach: Reach, run: Run) -> None:
        """Step 4: read the pool's ``supersedes`` edges; a replacement missing from the pool joins
        it (scored in one request, when the controller budget allows); a superseded memory's
        score falls by :func:`query_api.retrieval.currency.stale_factor` (not for a question about the past),
        and for a question about the present it ranks below its replacement
        (:func:`query_api.retrieval.currency.current_first`)."""
        st = run.st
        ids = list(st.pool)
        edges = await reach.labelled(ids, ["temporal"], 100 * len(ids) + 100, currency.SUPERSEDES)
        if not edges:
            return
        missing = sorted({e.source for e in edges if e.target in st.pool} - set(st.pool))
        fetched = [(n, i) for n, i in await self._fetch(reach, missing) if currency.recallable(n, run.as_of)] if missing else []
        newer = {i: c.node for i, c in st.pool.items()} | {n.id: n for n, _ in fetched}
        run.stale = {i: s for i, s in currency.superseded(edges, newer, run.as_of).items() if i in st.pool}
        strongest: dict[str, float] = {}
        for e in edges:
            n = newer.get(e.source)
            if n is not None and n.observed_at is not None and currency.recallable(n, run.as_of):
                run.current[e.source] = n.observed_at
            strongest[e.source] = max(strongest.get(e.source, 0.0), e.probability)
        # each fetched node is a visible replacement of a pool member (``missing``): it joins the pool
        joining = [Cand(n, info, "supersedes", 1.0, strongest[n.id]) for n, info in fetched]
        if joining and run.so.calls + run.so.requests_for([len(SCORE.questions)] * len(joining)) \
                <= self.params.limits.controller_calls and len(st.pool) < self.params.limits.visited_nodes:
            joining = joining[: self.params.limits.visited_nodes - len(st.pool)]
            for c in joining:
                st.pool[c.node.id] = c
                st.by_seq.setdefault((c.node.conversation_id, c.node.seq), c)
            await self._score(run, joining)
        past = st.route.get("past", 0.0)
        before = {i: c.score for i, c in st.pool.items()}
        own = currency.own_updates(run.stale, {i: c.node for i, c in st.pool.items()})
        after = currency.current_first(before, own) if currency.about_the_present(st.route, st.question) else dict(before)
        for i, s in run.stale.items():
            after[i] = min(after[i], before[i] * currency.stale_factor(s.probability, past, self.params.stale_weight))
        for i, c in st.pool.items():
            c.score = after[i]


def _statements(run: Run, people: frozenset[str], one_sentence: bool = False) -> dict[str, currency.Statement]:
    """The pool as :mod:`query_api.retrieval.currency` reads it: each member's score, whether it
    is an own statement of one of ``people`` not already superseded (with ``one_sentence``, also
    of one sentence: :func:`~topology.systemone.update_model.sentences`), and when it was said."""
    return {i: currency.Statement(
        c.score,
        i not in run.stale and (not one_sentence or len(sentences(c.node.content)) == 1)
        and subjects.own_statement(c.node, people),
        (c.node.observed_at or datetime.min.replace(tzinfo=UTC), c.node.seq)) for i, c in run.st.pool.items()}
