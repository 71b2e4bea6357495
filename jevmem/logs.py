"""Structured logs: one JSON object per line, with the trace id of the request or batch.

Each line has ``ts`` (UTC ISO-8601), ``level``, ``logger``, ``msg``, ``trace_id`` (when one is
set in :data:`topology.observe.TRACE_ID`), the exception text when there is one, and every
``extra={...}`` field the call passed. ``JEVMEM_LOG_FORMAT=text`` keeps plain text lines.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from topology import observe

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        trace_id = getattr(record, "trace_id", None) or observe.TRACE_ID.get()
        if trace_id:
            out["trace_id"] = trace_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def config(level: str = "INFO", fmt: str = "json") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the root logger (also what the Faust worker takes)."""
    formatter: dict[str, Any] = ({"()": f"{__name__}.JsonFormatter"} if fmt == "json"
                                 else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"})
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"main": formatter},
            "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "main"}},
            "root": {"level": level, "handlers": ["console"]},
            "loggers": {**{name: {"handlers": [], "propagate": True}
                           for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "faust", "mode", "aiokafka")},
                        # one INFO line per request otherwise
                        "elastic_transport": {"level": "WARNING"}, "httpx": {"level": "WARNING"}}}


def setup(level: str = "INFO", fmt: str = "json") -> None:
    import logging.config

    logging.config.dictConfig(config(level, fmt))
