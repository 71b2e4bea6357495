"""Pure write-path stages: typing, candidates, relations, consolidation.

Each stage is a function over schemas and ports; the Faust agents and the embedded runner call
the same functions.
"""
