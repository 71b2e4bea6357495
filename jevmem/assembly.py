"""The composition root: every part of the product built from :class:`~jevmem.settings.Settings`.

Settings hold values; the functions here turn them into parts: the embedder, the clients of
Kafka, Elasticsearch and Qdrant, the keyring and its key-encryption keys, the OIDC verifier, the
API-key store, System One and System Two, and (:func:`paths`) the write and read paths over a
deployment's stores. Both deployments build those paths here, the same way:
:mod:`jevmem.wiring` (embedded) and :mod:`jevmem.distributed` differ in the stores they pass.
What a part needs is imported when it is built, so a command pays only for the parts it builds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jevmem.settings import Settings
from streams.kafka_client import KafkaClient

if TYPE_CHECKING:
    from elasticsearch import AsyncElasticsearch

    from query_api.oidc import OidcVerifier
    from query_api.retrieval.controller import RetrievalController
    from query_api.retrieval.scoring import Scorer
    from query_api.retrieval.system_two import OpenAICompatibleSystemTwo
    from storage.ports import KeyStore
    from storage.qdrant.index import QdrantVectorIndex
    from storage.scope_cache import ScopeCache
    from streams.keyring import Keyring
    from streams.write_path import Stores
    from topology.pipeline import WritePath
    from topology.ports import Embedder
    from topology.sealing import Keks
    from topology.systemone.attribute_model import AttributeModel
    from topology.systemone.port import CountingSystemOne, SystemOne


def load_embedder(settings: Settings) -> Embedder:
    """The configured embedder: a named in-process model, or (``openai:<model>``) the embedding
    service at ``embedding_url`` (a new client per call; an in-process model is loaded once per
    process)."""
    if not settings.embedder.startswith("openai:"):
        from topology.embedding import load_embedder as load_model

        return load_model(settings.embedder, settings.model_cache)
    if not settings.embedding_url:
        raise ValueError(f"JEVMEM_EMBEDDER={settings.embedder} needs JEVMEM_EMBEDDING_URL (the service's base URL)")
    from topology.embedding_service import ServiceEmbedder

    spec = settings.embedder.removeprefix("openai:")
    joined = spec.endswith("+joined")
    model, _, dims = spec.removesuffix("+joined").partition(":")
    key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
    return ServiceEmbedder(settings.embedding_url, model, key, int(dims) if dims else settings.embedding_dimensions,
                           query_prefix=settings.embedding_query_prefix, passage_prefix=settings.embedding_passage_prefix,
                           max_tokens=settings.embedding_max_tokens, joined=joined)


def oidc(settings: Settings) -> OidcVerifier | None:
    """The bearer-token verifier of the configured issuer, or None (API keys only)."""
    if not settings.oidc_issuer:
        return None
    if not settings.oidc_audience:
        raise ValueError("JEVMEM_OIDC_ISSUER needs JEVMEM_OIDC_AUDIENCE (this API's identifier in the tokens' aud)")
    from query_api.oidc import OidcConfig, OidcVerifier

    return OidcVerifier(OidcConfig(issuer=settings.oidc_issuer, audience=settings.oidc_audience,
                                   jwks_url=settings.oidc_jwks_url, tenant_claim=settings.oidc_tenant_claim,
                                   scope_claim=settings.oidc_scope_claim, scope_prefix=settings.oidc_scope_prefix))


def keks(settings: Settings) -> Keks:
    """The configured key-encryption keys; :class:`~topology.errors.KekMissing` when there are
    none or they do not parse."""
    from topology.errors import KekMissing
    from topology.sealing import Keks

    if settings.encryption_kek is not None and settings.encryption_kek.get_secret_value().strip():
        try:
            return Keks.parse(settings.encryption_kek.get_secret_value(), "JEVMEM_ENCRYPTION_KEK")
        except ValueError as exc:
            raise KekMissing(str(exc)) from exc
    raise KekMissing("JEVMEM_ENCRYPTION=true needs a key-encryption key: set JEVMEM_ENCRYPTION_KEK (base64 of "
                     "32 random bytes; `jevmem encryption new-kek` makes one) or JEVMEM_ENCRYPTION_KEK_FILE")


def keyring(settings: Settings) -> Keyring | None:
    """The deployment's keyring (data keys in Elasticsearch, index ``<topic prefix>-datakeys``)
    when encryption is on, else None. Raises :class:`~topology.errors.KekMissing` when the
    key-encryption key is missing or malformed; :meth:`streams.keyring.Keyring.check` then
    checks it against the stored keys."""
    if not settings.encryption:
        return None
    from storage.datakeys import ElasticDataKeys
    from streams.keyring import Keyring

    kek = keks(settings)
    store = ElasticDataKeys(elasticsearch(settings), f"{settings.topic_prefix.lower()}-datakeys")
    return Keyring(store, kek, ttl_s=settings.encryption_key_cache_s)


def kafka(settings: Settings) -> KafkaClient:
    """How this process's Kafka clients connect (every client, from these settings)."""
    def path(p: Path | None) -> str | None:
        return str(p) if p is not None else None

    return KafkaClient(settings.kafka_bootstrap, settings.kafka_security_protocol, settings.kafka_sasl_mechanism,
                       settings.kafka_sasl_username, settings.kafka_sasl_password, path(settings.kafka_ssl_cafile),
                       path(settings.kafka_ssl_certfile), path(settings.kafka_ssl_keyfile),
                       settings.kafka_ssl_key_password)


def elasticsearch(settings: Settings) -> AsyncElasticsearch:
    """A client of the configured Elasticsearch node(s), with their credentials and CA."""
    from storage.elastic.client import es_client

    key = settings.elasticsearch_api_key.get_secret_value() if settings.elasticsearch_api_key else None
    auth = None
    if settings.elasticsearch_username:
        password = settings.elasticsearch_password.get_secret_value() if settings.elasticsearch_password else ""
        auth = (settings.elasticsearch_username, password)
    ca = str(settings.elasticsearch_ca_file) if settings.elasticsearch_ca_file else None
    return es_client(settings.elasticsearch_url, key, basic_auth=auth, ca_file=ca)


def qdrant(settings: Settings, dim: int, collection: str) -> QdrantVectorIndex:
    """The vector index ``collection`` on the configured Qdrant node(s) (``qdrant_url`` must be set)."""
    from storage.qdrant.index import QdrantVectorIndex

    if not settings.qdrant_url:
        raise ValueError("no Qdrant server configured (JEVMEM_QDRANT_URL)")
    return QdrantVectorIndex.server(settings.qdrant_url, dim, qdrant_key(settings), collection,
                                    ca_file=str(settings.qdrant_ca_file) if settings.qdrant_ca_file else None,
                                    shards=settings.qdrant_shards, replication_factor=settings.qdrant_replication_factor,
                                    realm_ef=settings.qdrant_realm_ef)


def qdrant_key(settings: Settings) -> str | None:
    """The API key a Qdrant client sends (None: none configured)."""
    return settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None


def system_one_and_scorer(settings: Settings, embedder: str | None = None) -> tuple[SystemOne, Scorer | None]:
    """The configured System One, and the in-process scorer that answers its candidate-scoring
    questions without the request path when it is the ``local`` backend (None: ask it). The
    local backend's weights are those trained with ``embedder`` (default: the configured one)."""
    if settings.system_one == "local":
        from query_api.retrieval.scoring import LocalScorer
        from topology.systemone.local import LocalSystemOne
        from topology.systemone.relation_model import RelationModel
        from topology.systemone.update_model import UpdateModel

        judge, name = settings.relation_judge, embedder or settings.embedder
        updates = UpdateModel.from_json(settings.update_judge.read_bytes()) if settings.update_judge else None
        if judge in ("learned", "rule"):
            local = LocalSystemOne(embedder=name, learned_relations=judge == "learned", update_model=updates)
        else:
            local = LocalSystemOne(embedder=name, relation_model=RelationModel.from_json(Path(judge).read_bytes()),
                                   update_model=updates)
        return local, LocalScorer(local)
    from typesafe_sdk import AsyncTypeSafeClient

    from topology.systemone.typesafe import TypeSafeSystemOne

    key = settings.typesafe_api_key.get_secret_value() if settings.typesafe_api_key else None
    client = AsyncTypeSafeClient(api_key=key, base_url=settings.typesafe_base_url, model=settings.typesafe_model)
    return TypeSafeSystemOne(client, model=settings.typesafe_model), None


def attribute_model(settings: Settings) -> AttributeModel | None:
    """The learned attribute model of ``settings.attribute_model`` (None: the one shipped for
    the embedder is used)."""
    from topology.systemone.attribute_model import AttributeModel

    return AttributeModel.from_json(settings.attribute_model.read_bytes()) if settings.attribute_model else None


def system_two(settings: Settings) -> OpenAICompatibleSystemTwo | None:
    """The configured System Two (answers and consolidation summaries), or None (none configured)."""
    if not settings.system_two_url:
        return None
    from query_api.retrieval.system_two import OpenAICompatibleSystemTwo

    key = settings.system_two_api_key.get_secret_value() if settings.system_two_api_key else None
    return OpenAICompatibleSystemTwo(settings.system_two_url, settings.system_two_model, key)


def key_store(settings: Settings) -> KeyStore:
    """Where API keys live: ``keys.sqlite3`` in the data directory (embedded), or an
    Elasticsearch index (distributed mode)."""
    from storage.keys import ElasticKeyStore, SqliteKeyStore

    if settings.mode == "distributed":
        return ElasticKeyStore(elasticsearch(settings), settings.keys_index)
    return SqliteKeyStore(Path(settings.data_dir) / "keys.sqlite3")


@dataclass(frozen=True)
class Paths:
    """The write and read paths over one deployment's stores (:func:`paths`)."""

    #: the System One backend, counting the write path's requests; queries ask ``inner`` directly
    system_one: CountingSystemOne
    #: the read path
    controller: RetrievalController
    #: the write path's in-memory conversations, attached to the stores (None: built to read only)
    reader: ScopeCache | None = None
    #: the write path (None: built to read only)
    write_path: WritePath | None = None

    def writer(self) -> WritePath:
        """The write path; ValueError when these paths were built to read only."""
        if self.write_path is None:
            raise ValueError("these paths were built to read only (writes=False)")
        return self.write_path


def paths(settings: Settings, stores: Stores, embedder: Embedder, *, embedded: bool, writes: bool = True) -> Paths:
    """The write and read paths over ``stores``, built alike for both deployments.

    One System One backend serves both paths (:func:`system_one_and_scorer`): the write path
    asks it through a :class:`~topology.systemone.port.CountingSystemOne`, the retrieval
    controller directly, with the local backend's in-process scorer. The write path reads the
    conversations it writes from a :class:`~storage.scope_cache.ScopeCache` attached to
    ``stores`` (:meth:`Stores.attach`: emptied when those conversations may have changed hands,
    and reloaded from the stores on use), summarises with System Two (:func:`system_two`), and asks
    the update question of a speaker's earlier memories across the user's conversations
    (:func:`storage.speaker_facts.speaker_facts`) where it can.

    What ``embedded`` decides (a process with an embedded store, or a distributed one):

    * the reader's bound, ``settings.memory(embedder.dim, embedded=embedded).write_nodes``;
    * the local backend's weights: those trained with ``embedder`` (embedded), or with the
      configured model, ``settings.embedder`` (distributed);
    * the speaker's earlier memories: asked embedded wherever the vector index searches a
      realm; distributed only with Qdrant (``qdrant_url``), searchable as soon as written, since
      Elasticsearch's vector index is searchable only after a refresh, which the write path never
      asks for (without Qdrant the update question asks a turn's candidates only).

    ``writes=False`` (a process that only reads, the distributed service): no reader and no
    write path; ``stores`` are left as they are."""
    from query_api.retrieval.controller import RetrievalController
    from storage.scope_cache import ScopeCache
    from storage.speaker_facts import speaker_facts
    from topology.pipeline import WritePath
    from topology.systemone.port import CountingSystemOne

    inner, scorer = system_one_and_scorer(settings, embedder.name if embedded else None)
    so = CountingSystemOne(inner)
    attributes = attribute_model(settings)
    reader: ScopeCache | None = None
    write_path: WritePath | None = None
    if writes:
        reader = ScopeCache(stores.nodes, settings.memory(embedder.dim, embedded=embedded).write_nodes, embedder.dim)
        stores.attach(reader)
        facts = speaker_facts(stores.vectors, stores.nodes, reader) if embedded or settings.qdrant_url else None
        write_path = WritePath(embedder, so, reader, settings.params, summariser=system_two(settings), facts=facts,
                               attribute_model=attributes)
    controller = RetrievalController(embedder, inner, stores.vectors, stores.lexical, stores.nodes, stores.edges,
                                     settings.params, scorer=scorer, attribute_model=attributes)
    return Paths(so, controller, reader, write_path)
