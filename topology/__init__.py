"""The domain and the dataflow: schemas, parameters, System One, pure write-path stages.

Imports nothing of ours; every other package builds on it.
"""
