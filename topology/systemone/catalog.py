"""The question catalog: every typed question the product asks System One, in our own words."""

from __future__ import annotations

from topology.systemone.port import Choice, Noul, Task
from topology.systemone.turn_kinds import TURN_KINDS

TYPING = Task(
    "typing",
    (
        Noul("episodic", "Does this memory record a specific event or experience at a point in time?"),
        Noul("semantic", "Does this memory state a general fact or lasting knowledge about someone or something?"),
        Noul("procedural", "Does this memory describe how to do something, steps, or a tool's operation?"),
        Noul("preference", "Does this memory express a like, dislike, wish or preference?"),
        # statement, question, tool (call or result), advice, chatter (small talk)
        Choice("kind", "What kind of turn is this?", TURN_KINDS),
    ),
)

RELATION = Task(
    "relation",
    (
        Noul("semantic", "Are the two memories about the same topic, so that one helps understand the other?"),
        Noul("caused_by", "Was the newer memory caused or motivated by what the earlier memory describes?"),
        Noul("causes", "Does the newer memory describe a cause of what the earlier memory describes?"),
        Noul("updates", "Does the newer memory replace what the older one stated as currently true about the same "
                        "person and attribute?"),
    ),
)

ALIAS = Task(
    "alias",
    (Noul("alias", "Do these two entity names refer to the same real-world entity?"),),
)

CONSOLIDATION = Task(
    "consolidation",
    (
        Noul("redundant", "Does one memory say nothing the other does not already say?"),
        Noul("contradiction", "Do the two memories contradict each other?"),
        Noul("obsolete", "Does the newer memory make the older one out of date?"),
        Noul("link_useful", "Would linking these two memories help answer future questions?"),
        Choice(
            "representation",
            "How should these two memories be represented?",
            ("keep_separate", "merge", "promote", "uncertain"),
        ),
    ),
)

ROUTE = Task(
    "route",
    (
        Noul("semantic", "Does answering need memories about the same topic as the question?"),
        Noul("temporal", "Does answering need when things happened or their order in time?"),
        Noul("causal", "Does answering need causes, reasons or consequences?"),
        Noul("entity", "Does answering need what is known about specific people, places or things?"),
        Noul("multi_hop", "Does answering need to combine several separate memories?"),
        Noul("recency", "Does the question care most about the latest state of things?"),
        Noul("past", "Does the question ask what was true before, rather than what is true now?"),
    ),
)

ASSESS = Task(
    "assess",
    (
        Noul("sufficient", "Is the evidence gathered so far enough to answer the question?"),
        Noul("continue_useful", "Is it worth searching further memories?"),
        Noul("missing", "Is some needed piece of evidence clearly still missing?"),
        Noul("contradiction", "Does the gathered evidence contradict itself?"),
    ),
)

SCORE = Task(
    "score",
    (
        Noul("relevance", "Is this memory relevant to the question?"),
        Noul("relation_useful", "Is the relation that led to this memory useful for the question?"),
        Noul("new_information", "Does this memory add information not already in the evidence?"),
        Noul("supports", "Does this memory support the evidence gathered so far?"),
    ),
)

ALL_TASKS: tuple[Task, ...] = (TYPING, RELATION, ALIAS, CONSOLIDATION, ROUTE, ASSESS, SCORE)
