"""``jevmem encryption new-kek|check|rotate``: the key-encryption keys of the Kafka log's
crypto-shredding (``JEVMEM_ENCRYPTION``; docs/security.md)."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

import orjson
import typer
from rich.console import Console

from jevmem import assembly
from jevmem.settings import Settings

encryption_app = typer.Typer(help="Key-encryption keys of the sealed Kafka log (JEVMEM_ENCRYPTION).",
                             no_args_is_help=True)
_err = Console(stderr=True)


@encryption_app.command("new-kek")
def new_kek() -> None:
    """Print a new random key-encryption key (base64 of 32 bytes) for JEVMEM_ENCRYPTION_KEK."""
    sys.stdout.write(base64.b64encode(os.urandom(32)).decode() + "\n")


async def _keyring_do(what: str) -> dict[str, object]:
    settings = Settings().model_copy(update={"encryption": True})
    keyring = assembly.keyring(settings)
    assert keyring is not None
    try:
        if what == "rotate":
            n = await keyring.rotate()
            return {"rewrapped": n, "kek": keyring.keks.current.id, "wrapping": sorted(await keyring.store.kek_ids())}
        await keyring.check()
        return {"ok": True, "kek": keyring.keks.current.id, "wrapping": sorted(await keyring.store.kek_ids())}
    finally:
        await keyring.close()


@encryption_app.command("check")
def check() -> None:
    """Check that the configured key-encryption keys unwrap every stored data key."""
    sys.stdout.write(orjson.dumps(asyncio.run(_keyring_do("check"))).decode() + "\n")


@encryption_app.command("rotate")
def rotate() -> None:
    """Re-wrap every data key wrapped by a previous key-encryption key (listed after the current
    one in JEVMEM_ENCRYPTION_KEK) under the current one; the log is not touched. Then remove the
    previous key from the configuration."""
    out = asyncio.run(_keyring_do("rotate"))
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    _err.print(f"re-wrapped {out['rewrapped']} data keys under {out['kek']}")
