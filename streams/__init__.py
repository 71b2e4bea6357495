"""Drivers of the write path: the embedded in-process runner, the Faust app, producer, replay."""
