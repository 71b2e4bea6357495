"""Pure write-path stages: typing, candidates, relations, consolidation.

Each stage is a function over schemas and ports; the Faust agents and the in-process writer call
the same functions.
"""
