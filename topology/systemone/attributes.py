"""Which attribute of a person a memory is about, read from its embedding.

A fact that changes ("I'm based in Madrid" after "I live in Porto") and a fact about another
attribute of the same person ("I answer to Tariq") are about equally similar under a sentence
embedder: the same speaker, the same register. What tells them apart is *what* they are about.
:class:`AttributeSpace` projects a memory's vector onto a fixed list of generic questions about a
person (:data:`PROTOTYPES`: where they live, who they work for, what they drive, ...), embedded
once as questions, and turns the similarities into a distribution over them (a softmax of the
similarities standardised per memory, so the scale of an embedder's cosines does not matter).
Two memories are about the same attribute to the degree their distributions overlap
(:meth:`AttributeSpace.similarity`, 0 to 1).

The questions are about people in general, not about any benchmark's attributes; a memory about
none of them spreads its distribution and overlaps little with anything.

Under an embedder with a learned :class:`~topology.systemone.attribute_model.AttributeModel`, a
*memory's* distribution has two parts: the model's probabilities of the attributes it knows,
then its probability of none of them spread over the generic prototypes as above. A question's
vector is steered by its distribution over the generic prototypes alone
(:meth:`AttributeSpace.question_profiles`); which learned attribute a question is about
(:meth:`AttributeSpace.known`) tells the read path which of a person's statements answer it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from topology.ports import Embedder
from topology.systemone.attribute_model import AttributeModel

#: Generic questions about a person, one per attribute a person states and later changes.
PROTOTYPES: tuple[str, ...] = (
    "Where does the person live?",
    "Which company does the person work for?",
    "What is the person's job?",
    "Who is the person's manager or boss?",
    "What car does the person drive?",
    "What is the person's favourite food?",
    "Who is the person dating or married to?",
    "What phone does the person use?",
    "Which gym does the person go to?",
    "What is the person's hobby?",
    "What pet does the person have?",
    "What school or university does the person attend?",
    "What language is the person learning?",
    "What sport does the person play?",
    "What music does the person like?",
    "What diet does the person follow?",
    "What book is the person reading?",
    "Where does the person go on holiday?",
    "What health problem does the person have?",
    "Who is the person's best friend?",
    "What instrument does the person play?",
    "Which team does the person support?",
    "How does the person get to work?",
    "How old is the person?",
    "What does the person like to drink?",
    "What show is the person watching?",
    "What is the person's name?",
    "Where is the person from?",
    "What does the person do at the weekend?",
    "What is the person's favourite game?",
)
#: Softmax temperature in standard deviations of a memory's similarities to the prototypes.
TEMPERATURE = 0.5


class AttributeSpace:
    """The prototypes' question vectors under one embedder, and what they make of memories."""

    def __init__(self, prototypes: np.ndarray, temperature: float = TEMPERATURE,
                 learned: AttributeModel | None = None) -> None:
        if prototypes.ndim != 2 or prototypes.shape[0] < 2:
            raise ValueError("an attribute space needs at least two prototype vectors")
        if learned is not None and learned.dim != prototypes.shape[1]:
            raise ValueError("the learned attribute model reads vectors of another width")
        self.prototypes = np.asarray(prototypes, dtype=np.float32)
        self.temperature = temperature
        self.learned = learned
        known = [j for j in range(len(learned.labels)) if j != learned.none] if learned is not None else []
        self._known = known
        #: what :meth:`steer` moves towards, one row per entry of a memory's distribution
        self._basis = (np.concatenate([learned.directions[known].astype(np.float32), self.prototypes])
                       if learned is not None else self.prototypes)

    @classmethod
    def of(cls, embedder: Embedder, learned: AttributeModel | None = None) -> AttributeSpace:
        """The space of :data:`PROTOTYPES` embedded as questions by ``embedder`` (one call, once
        per embedder object), with the learned model shipped for ``embedder.name`` if any; with
        ``learned``, that model instead, in a space of its own (:meth:`with_model`)."""
        if learned is not None:
            return cls.with_model(embedder, learned)
        try:
            return _SPACES[embedder]
        except KeyError:
            pass
        except TypeError:  # an embedder that cannot be weakly referenced is embedded each time
            return cls._embedded(embedder)
        space = _SPACES[embedder] = cls._embedded(embedder)
        return space

    @property
    def reads_before(self) -> bool:
        """Whether :meth:`profiles` reads the vectors of the turns memories were read after."""
        return self.learned is not None and bool(self.learned.context)

    @classmethod
    def _embedded(cls, embedder: Embedder) -> AttributeSpace:
        return cls.with_model(embedder, AttributeModel.shipped(embedder.name))

    @classmethod
    def with_model(cls, embedder: Embedder, learned: AttributeModel | None) -> AttributeSpace:
        """The space of :data:`PROTOTYPES` under ``embedder`` with ``learned`` as its learned
        model (None, or a model of another width: none), embedded anew (not the shared one of
        :meth:`of`): for weights other than the shipped ones."""
        prototypes = np.asarray(embedder.embed_query(list(PROTOTYPES)), dtype=np.float32)
        return cls(prototypes, learned=learned if learned is not None and learned.dim == prototypes.shape[1] else None)

    def profiles(self, vectors: np.ndarray, before: np.ndarray | None = None) -> np.ndarray:
        """One distribution per memory vector (row of ``vectors``; rows sum to 1): over the
        prototypes, or, with a learned model, over its known attributes and then the prototypes
        (see the module). ``before``: the vectors of the turns the memories were read after, one
        row each (a zero row where none), which the learned model discounts
        (:meth:`~topology.systemone.attribute_model.AttributeModel.inputs`)."""
        generic = self.question_profiles(vectors)
        if self.learned is None:
            return generic
        p = self.learned.probabilities(self.learned.inputs(vectors, before))
        none = p[:, self.learned.none: self.learned.none + 1]
        return np.concatenate([p[:, self._known], none * generic], axis=1).astype(np.float32)

    def known(self, vectors: np.ndarray, before: np.ndarray | None = None) -> np.ndarray | None:
        """The learned model's probability of each attribute it knows (columns in the order of
        its labels, ``none`` left out) per row of ``vectors``, read as :meth:`profiles` reads
        memories (``before``: the vectors they were read after); None without a learned model.
        A question's vector is read the same way (no ``before``): the model places a question
        about an attribute with the statements of that attribute."""
        if self.learned is None:
            return None
        return self.learned.probabilities(self.learned.inputs(vectors, before))[:, self._known]

    def about(self, profiles: np.ndarray) -> np.ndarray | None:
        """The highest probability of one learned attribute in each row of ``profiles`` (rows of
        :meth:`profiles`): how far the learned model reads each memory as about one attribute of
        a person; None without a learned model."""
        if self.learned is None:
            return None
        known = np.asarray(profiles)[:, : len(self._known)]
        return known.max(axis=1) if known.shape[1] else np.zeros(len(known), dtype=np.float32)

    def towards(self, vectors: np.ndarray, attribute: int, weight: float = 1.0) -> np.ndarray:
        """``vectors`` (rows, normalised first) plus ``weight`` times the learned direction of
        the known attribute ``attribute`` (a column of :meth:`known`), normalised again: a search
        by the result prefers memories about that attribute. Needs a learned model."""
        if self.learned is None:
            raise ValueError("moving towards a learned attribute needs a learned attribute model")
        v = np.asarray(vectors, dtype=np.float32)
        one = np.zeros((len(v), len(self._basis)), dtype=np.float32)
        one[:, attribute] = 1.0  # the learned directions come first in the basis, in ``known``'s order
        return self.steer(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12), weight, one)

    def question_profiles(self, vectors: np.ndarray) -> np.ndarray:
        """One distribution over the generic prototypes per row of ``vectors`` (rows sum to 1)."""
        s = np.asarray(vectors, dtype=np.float32) @ self.prototypes.T
        z = (s - s.mean(axis=1, keepdims=True)) / np.maximum(s.std(axis=1, keepdims=True), 1e-6)
        e = np.exp((z - z.max(axis=1, keepdims=True)) / self.temperature)
        return e / e.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]

    def steer(self, vectors: np.ndarray, weight: float, profiles: np.ndarray | None = None) -> np.ndarray:
        """``vectors`` (unit rows) moved towards what each is about: plus ``weight`` times the
        unit mean of the prototypes (and, with a learned model, its attributes' directions) under
        its distribution, normalised again. ``profiles``: the rows' :meth:`profiles` or
        :meth:`question_profiles` when already computed (default: :meth:`profiles`). A search by
        the result prefers memories about the same attribute over ones merely worded alike."""
        v = np.asarray(vectors, dtype=np.float32)
        profiles = self.profiles(v) if profiles is None else profiles
        toward = profiles @ (self.prototypes if profiles.shape[1] == len(self.prototypes) else self._basis)
        toward /= np.maximum(np.linalg.norm(toward, axis=1, keepdims=True), 1e-12)
        out = v + weight * toward
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)  # type: ignore[no-any-return]

    def similarity(self, a: Sequence[float], b: Sequence[float]) -> float:
        """How much two memories' distributions overlap (their dot product, 0 to 1), rounded to
        4 places so that a state read back from JSON gives the same features."""
        p = self.profiles(np.asarray([a, b], dtype=np.float32))
        return round(float(p[0] @ p[1]), 4)


def before_rows(ids: Sequence[str], before: Mapping[str, Sequence[float] | np.ndarray], dim: int) -> np.ndarray:
    """The ``before`` vector of each of ``ids`` as rows for :meth:`AttributeSpace.profiles` (a
    zero row where it has none, or one of another width)."""
    out = np.zeros((len(ids), dim), dtype=np.float32)
    for k, i in enumerate(ids):
        v = before.get(i)
        if v is not None and len(v) == dim:
            out[k] = v
    return out


_SPACES: weakref.WeakKeyDictionary[Embedder, AttributeSpace] = weakref.WeakKeyDictionary()
