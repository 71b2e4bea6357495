"""What the server-side vector indexes share for realm searches (:class:`~storage.ports.RealmSearch`):
the tie order of one ranking over many conversations.

A vector server (Qdrant, an Elasticsearch ``knn`` search) returns the best points by score only,
ties in an order of its own. A realm search promises ties by earlier seq, then id (as the embedded
store ranks), so :func:`rank_with_ties` asks the server for more than ``limit`` points while the
last point it returned ties with the ``limit``-th: every point scoring as high as the ``limit``-th
is then in hand, and the sort by ``(-score, seq, id)`` is the whole ranking's first ``limit``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from storage.ports import Hit


@dataclass(frozen=True)
class Point:
    """One answer of a vector server: a node id, its score, and the node's seq and conversation."""

    id: str
    score: float
    seq: int
    conversation_id: str


def complete(points: list[Point], asked: int, limit: int, most: int) -> bool:
    """Whether a server's best ``asked`` points (``points``, best first) hold the ranking's first
    ``limit``: fewer came than were asked, the server's cap ``most`` was asked, or the last point
    does not tie with the ``limit``-th (so nothing left out scores as high as it)."""
    return len(points) < asked or asked >= most or points[-1].score != points[min(limit, len(points)) - 1].score


def first(points: list[Point], limit: int) -> list[Hit]:
    """The best ``limit`` of ``points`` (a :func:`complete` answer), ties by earlier seq, then id."""
    best = sorted(points, key=lambda p: (-p.score, p.seq, p.id))[:limit]
    return [Hit(p.id, p.score, p.conversation_id) for p in best]


def first_ask(limit: int, most: int) -> int:
    """How many points a realm search asks a server for first: twice ``limit`` (at least
    ``limit + 1``, at most ``most``). An exact search pays for the points it scans, not for those
    it returns, and a realm of repeated turns (greetings, a template's lines) often ties at the
    ``limit``-th: asked for one more, it would be asked again."""
    return min(max(limit + 1, 2 * limit), most)


async def rank_with_ties(fetch: Callable[[int], Awaitable[list[Point]]], limit: int, most: int) -> list[Hit]:
    """The best ``limit`` points, ties by earlier seq, then id, as hits naming their conversation.

    ``fetch(n)`` returns the server's best ``n`` points, best score first (ties in any order).
    It is called with :func:`first_ask` first, then with twice as many while the last point
    returned ties with the ``limit``-th (at most ``most``: the server's own cap, where a tie that
    wide is cut in the server's order)."""
    if limit <= 0:
        return []
    n = first_ask(limit, most)
    while True:
        points = await fetch(n)
        if complete(points, n, limit, most):
            return first(points, limit)
        n = min(2 * n, most)
