"""``jevmem keys create|list|revoke``: API keys of the configured deployment (embedded data
directory, or Elasticsearch with ``JEVMEM_MODE=distributed``)."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import orjson
import typer
from rich.console import Console

from jevmem.settings import Settings

keys_app = typer.Typer(help="API keys (one tenant and a set of scopes each; stored hashed).", no_args_is_help=True)
_err = Console(stderr=True)


def _settings(data_dir: str | None) -> Settings:
    s = Settings()
    return s if data_dir is None else s.model_copy(update={"data_dir": data_dir})


DataDir = Annotated[str | None, typer.Option(
    "--data-dir", metavar="DIR", help="Embedded store directory [env JEVMEM_DATA_DIR, default .jevmem].")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@keys_app.command("create")
def create(tenant: Annotated[str, typer.Option(metavar="TENANT", help="The tenant this key acts for.")],
           scopes: Annotated[str, typer.Option(metavar="SCOPES", help="Comma-separated: ingest, query, admin.")] = "ingest,query",
           label: Annotated[str, typer.Option(metavar="LABEL", help="A note to recognise the key by.")] = "",
           users: Annotated[str | None, typer.Option(metavar="USERS", help=(
               "Comma-separated user ids: the key then remembers and recalls only these users' memory."))] = None,
           data_dir: DataDir = None, as_json: Json = False) -> None:
    """Make a key and print it once (only its hash is stored). In distributed mode, the tenant's
    memories index is made now too, so that its first writes do not wait for it."""
    from jevmem.assembly import key_store
    from query_api.auth import mint

    try:
        key, record = mint(tenant, [s.strip() for s in scopes.split(",") if s.strip()], label,
                           None if users is None else [u.strip() for u in users.split(",") if u.strip()])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc

    async def go() -> None:
        settings = _settings(data_dir)
        store = key_store(settings)
        try:
            await store.create(record)
        finally:
            await store.close()
        if settings.mode == "distributed":  # the tenant's index now, not on its first write
            from jevmem.distributed import prepare_tenant
            from topology.errors import StoreUnavailable

            try:
                await prepare_tenant(settings, record.tenant_id)
            except StoreUnavailable as exc:  # the key is made: print it; the first write makes the index
                _err.print(f"the tenant's index was not made now ({exc}); its first write will make it")

    asyncio.run(go())
    if as_json:
        sys.stdout.write(orjson.dumps({"key_id": record.key_id, "key": key, "tenant": record.tenant_id,
                                       "scopes": record.scopes, "users": record.users}).decode() + "\n")
    else:
        sys.stdout.write(key + "\n")
        _err.print(f"key {record.key_id} for tenant {record.tenant_id!r}, scopes {','.join(record.scopes)} "
                   "(shown once: store it now)")


@keys_app.command("list")
def list_keys(tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="Only this tenant's keys.")] = None,
              data_dir: DataDir = None, as_json: Json = False) -> None:
    """Key ids, tenants, scopes and state (never the keys)."""
    from jevmem.assembly import key_store

    async def go() -> list[dict[str, object]]:
        store = key_store(_settings(data_dir))
        try:
            return [r.model_dump(mode="json", exclude={"salt", "hash"}) for r in await store.list(tenant)]
        finally:
            await store.close()

    rows = asyncio.run(go())
    if as_json:
        sys.stdout.write(orjson.dumps(rows).decode() + "\n")
        return
    for r in rows:
        state = "revoked" if r["revoked_at"] else "active"
        sys.stdout.write(f"{r['key_id']}\t{r['tenant_id']}\t{','.join(r['scopes'])}\t{state}\t{r['label']}\n")  # type: ignore[arg-type]


@keys_app.command("revoke")
def revoke(key_id: str, data_dir: DataDir = None) -> None:
    """Revoke a key (servers stop accepting it within ``JEVMEM_AUTH_CACHE_SECONDS``)."""
    from jevmem.assembly import key_store

    async def go() -> bool:
        store = key_store(_settings(data_dir))
        try:
            return await store.revoke(key_id)
        finally:
            await store.close()

    if not asyncio.run(go()):
        _err.print(f"no key {key_id}")
        raise typer.Exit(1)
    _err.print(f"revoked {key_id}")
