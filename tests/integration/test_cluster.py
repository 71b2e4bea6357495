"""The distributed pipeline on a real cluster, connected by settings alone: three Kafka brokers
(``scripts/kafka/cluster.sh``: KRaft, a SASL_SSL listener with SCRAM and PLAIN, a mutual-TLS
listener, self-signed certificates), three Qdrant nodes (``scripts/qdrant/cluster.sh``: https and an
API key, the collection replicated on two of them), and Elasticsearch behind a TLS-terminating
proxy that checks credentials (``scripts/elasticsearch/tls_proxy.py``: the test build of
Elasticsearch has no TLS of its own).

Also: a wrong password, a CA the client does not trust and a plaintext client against the TLS
listener fail fast with a clear error and no secret in it; an existing topic with fewer replicas
than configured is refused with what to do; and one short chaos round loses a broker of three
mid-stream.

Needs ``JEVMEM_TEST_KAFKA_CLUSTER_ENV`` and ``JEVMEM_TEST_QDRANT_CLUSTER_ENV`` (the clusters'
``client.env`` files; ``scripts/test`` starts both clusters) besides the single-node servers.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import admin as kafka_admin
from elasticsearch import AuthenticationException
from pydantic import SecretStr

pytestmark = pytest.mark.integration

from tests.integration.servers import ES_URL, LOCOMO, require_stack  # noqa: E402

require_stack()
KAFKA_ENV = os.environ.get("JEVMEM_TEST_KAFKA_CLUSTER_ENV")
QDRANT_ENV = os.environ.get("JEVMEM_TEST_QDRANT_CLUSTER_ENV")
if not (KAFKA_ENV and QDRANT_ENV):
    pytest.skip("JEVMEM_TEST_KAFKA_CLUSTER_ENV / JEVMEM_TEST_QDRANT_CLUSTER_ENV not set", allow_module_level=True)

from jevmem import assembly, locomo  # noqa: E402
from jevmem.bench.chaos import run_chaos  # noqa: E402
from jevmem.bench.kafka import spawn_worker, stop_workers, worker_env  # noqa: E402
from jevmem.distributed import distributed_stores  # noqa: E402
from jevmem.settings import Settings  # noqa: E402
from jevmem.wiring import build_embedded  # noqa: E402
from storage.qdrant.index import QdrantVectorIndex, check_server  # noqa: E402
from streams.kafka_admin import TopicLayoutError, ensure_topics  # noqa: E402
from streams.kafka_client import KafkaClient  # noqa: E402
from streams.producer import ObservationProducer  # noqa: E402
from streams.replay import graph_of  # noqa: E402
from topology.embedding import default_embedder  # noqa: E402
from topology.errors import BrokerUnavailable, StoreUnavailable  # noqa: E402
from topology.schemas import Observation  # noqa: E402
from topology.topics import TopicLayout  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: A connection that can never work must fail within this many seconds.
FAIL_FAST_S = 15.0


def client_env(path: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of a cluster script's ``client.env``."""
    out: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            out[name] = value
    return out


KAFKA_CLIENT = client_env(KAFKA_ENV)
QDRANT_CLIENT = client_env(QDRANT_ENV)
TLS = Path(KAFKA_CLIENT["JEVMEM_KAFKA_SSL_CAFILE"]).parent
PASSWORD = Path(KAFKA_CLIENT["JEVMEM_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip()
ES_PROXY_API_KEY = "test-api-key-" + uuid.uuid4().hex


def cluster_kafka(**change: str) -> KafkaClient:
    """The cluster's SASL_SSL client (SCRAM-SHA-512), with ``change`` applied."""
    fields = {"bootstrap": KAFKA_CLIENT["JEVMEM_KAFKA_BOOTSTRAP"], "security_protocol": "SASL_SSL",
              "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": KAFKA_CLIENT["JEVMEM_KAFKA_SASL_USERNAME"],
              "ssl_cafile": KAFKA_CLIENT["JEVMEM_KAFKA_SSL_CAFILE"], **change}
    password = SecretStr(fields.pop("password", PASSWORD))
    return KafkaClient(**fields, sasl_password=password)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def es_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """https://127.0.0.1:PORT in front of the test Elasticsearch node, checking basic auth
    (user ``jevmem``, the cluster password) and an API key."""
    tmp = tmp_path_factory.mktemp("esproxy")
    (tmp / "password").write_text(PASSWORD)
    (tmp / "api-key").write_text(ES_PROXY_API_KEY)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "elasticsearch" / "tls_proxy.py"),
                             "--listen-port", str(port), "--upstream", ES_URL or "", "--cert", str(TLS / "server.pem"),
                             "--key", str(TLS / "server.key"), "--user", "jevmem", "--password-file",
                             str(tmp / "password"), "--api-key-file", str(tmp / "api-key")],
                            stdout=subprocess.PIPE, stderr=(tmp / "proxy.log").open("wb"))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert b"ready" in line, line
    yield f"https://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def cluster_settings(es_url: str, tag: str, **change: object) -> Settings:
    """Every client of the pipeline on the clusters, from settings only."""
    fields: dict[str, object] = dict(
        kafka_bootstrap=KAFKA_CLIENT["JEVMEM_KAFKA_BOOTSTRAP"], kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512", kafka_sasl_username="jevmem", kafka_sasl_password=SecretStr(PASSWORD),
        kafka_ssl_cafile=Path(KAFKA_CLIENT["JEVMEM_KAFKA_SSL_CAFILE"]), kafka_replication_factor=3,
        kafka_min_insync_replicas=2, partitions=6,
        qdrant_url=QDRANT_CLIENT["JEVMEM_QDRANT_URL"],
        qdrant_api_key=SecretStr(Path(QDRANT_CLIENT["JEVMEM_QDRANT_API_KEY_FILE"]).read_text().strip()),
        qdrant_ca_file=Path(QDRANT_CLIENT["JEVMEM_QDRANT_CA_FILE"]), qdrant_shards=3, qdrant_replication_factor=2,
        elasticsearch_url=es_url, elasticsearch_username="jevmem", elasticsearch_password=SecretStr(PASSWORD),
        elasticsearch_ca_file=TLS / "ca.pem",
        topic_prefix=tag, app_id=tag, store_prefix=f"{tag}-", write_batch=16)
    return Settings(**{**fields, **change})  # type: ignore[arg-type]


def observations(turns: int) -> list[Observation]:
    out: list[Observation] = []
    for f in sorted(LOCOMO.glob("*.json"))[:2]:
        out += locomo.observations(locomo.load(f), "cluster", f"locomo-{f.stem}")[:turns]
    return out


async def test_pipeline_end_to_end_on_the_secure_clusters(es_proxy: str, tmp_path: Path) -> None:
    tag = f"cl{uuid.uuid4().hex[:8]}"
    settings = cluster_settings(es_proxy, tag)
    obs = observations(16)
    scopes = sorted({o.scope for o in obs}, key=lambda s: s.key)
    ensure_topics(assembly.kafka(settings), tag, settings.topic_layout())
    meta = assembly.kafka(settings).check()
    assert len(meta.brokers) == 3
    for name in (t for t in meta.topics if t.startswith(f"{tag}.")):
        assert {len(p.replicas) for p in meta.topics[name].partitions.values()} == {3}, name
        assert len(meta.topics[name].partitions) == 6

    env = {**worker_env(settings), "JEVMEM_WORKER_DATADIR": str(tmp_path / "w")}
    worker = spawn_worker(env, tmp_path / "worker.log")
    stores = distributed_stores(settings, f"{tag}-", default_embedder().dim)
    try:
        await wait(lambda: "[^Worker]: Ready" in (tmp_path / "worker.log").read_text(errors="replace"), worker, tmp_path)
        async with ObservationProducer(assembly.kafka(settings), tag) as producer:
            await producer.send(obs)

        async def count() -> int:
            return sum([len(await stores.nodes.scan(s)) for s in scopes])

        deadline = time.monotonic() + 240
        while await count() < len(obs) and time.monotonic() < deadline:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
            await asyncio.sleep(1.0)
        embedded = build_embedded(Settings(), embedder=default_embedder(), data_dir=":memory:")
        try:
            for i in range(0, len(obs), settings.write_batch):
                await embedded.pipeline.ingest(obs[i: i + settings.write_batch])
            for scope in scopes:
                assert await graph_of(stores, scope) == await graph_of(embedded.stores, scope), scope
        finally:
            await embedded.close()
        assert isinstance(stores.vectors, QdrantVectorIndex)
        assert sum([len(await stores.vectors.ids(s)) for s in scopes]) == len(obs)
    finally:
        stop_workers([worker])
        await stores.close()
    # the collection the worker created is replicated on two of the three Qdrant nodes
    index = assembly.qdrant(settings, 1, f"{tag}_memories")
    info = await index._client.get_collection(index.collection)
    await index.close()
    assert (info.config.params.shard_number, info.config.params.replication_factor) == (3, 2)


async def wait(ready: Callable[[], bool], worker: subprocess.Popen[bytes], tmp: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        assert worker.poll() is None, (tmp / "worker.log").read_text(errors="replace")[-3000:]
        await asyncio.sleep(0.5)
    pytest.fail("worker not ready:\n" + (tmp / "worker.log").read_text(errors="replace")[-3000:])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
async def test_each_sasl_mechanism_produces_to_a_replicated_topic(mechanism: str) -> None:
    kafka = cluster_kafka(sasl_mechanism=mechanism)
    tag = f"mech{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, tag, TopicLayout(partitions=3))
    async with ObservationProducer(kafka, tag) as producer:
        delivered = await producer.send(observations(2))
    assert len(delivered) == 4


async def test_mutual_tls_listener_needs_the_client_certificate() -> None:
    mtls = KafkaClient(KAFKA_CLIENT["KAFKA_CLUSTER_MTLS_BOOTSTRAP"], "SSL", ssl_cafile=str(TLS / "ca.pem"),
                       ssl_certfile=KAFKA_CLIENT["KAFKA_CLUSTER_CLIENT_CERT"],
                       ssl_keyfile=KAFKA_CLIENT["KAFKA_CLUSTER_CLIENT_KEY"])
    assert len(mtls.check().brokers) == 3
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable):
        KafkaClient(mtls.bootstrap, "SSL", ssl_cafile=str(TLS / "ca.pem")).check(timeout_s=FAIL_FAST_S)
    assert time.monotonic() - started < FAIL_FAST_S + 2


@pytest.mark.parametrize("wrong", ["password", "ca", "plaintext"])
async def test_a_connection_that_cannot_work_fails_fast_and_says_why(wrong: str) -> None:
    kafka = {"password": cluster_kafka(password="not-the-password"),
             "ca": cluster_kafka(ssl_cafile=KAFKA_CLIENT["KAFKA_CLUSTER_OTHER_CA"]),
             "plaintext": KafkaClient(KAFKA_CLIENT["JEVMEM_KAFKA_BOOTSTRAP"])}[wrong]
    want = {"password": "authentication failed", "ca": "TLS failed", "plaintext": "PLAINTEXT"}[wrong]
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable) as err:
        ensure_topics(kafka, f"bad{uuid.uuid4().hex[:8]}")
    assert time.monotonic() - started < FAIL_FAST_S + 2
    assert want in str(err.value) and PASSWORD not in str(err.value)
    if wrong != "plaintext":  # the producer SDK fails at once too, not after its 30 s acknowledgement timeout
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable) as err:
            async with ObservationProducer(kafka, "bad") as producer:
                await producer.send(observations(1))
        assert time.monotonic() - started < FAIL_FAST_S
        assert want in str(err.value) and PASSWORD not in str(err.value)


def jevmem(args: list[str], env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """``jevmem ARGS`` as an operator runs it, with ``env`` over this process's environment."""
    return subprocess.run([sys.executable, "-c", "from jevmem.cli import main; main()", *args], cwd=tmp,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def one_line(done: subprocess.CompletedProcess[str], *wanted: str) -> str:
    """The command failed with exactly one line on stderr naming ``wanted``: no traceback, none
    of librdkafka's own log lines, no secret."""
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("jevmem: "), done.stderr
    assert "Traceback" not in done.stderr and "%3|" not in done.stderr and PASSWORD not in done.stderr
    assert all(w in done.stderr for w in wanted), done.stderr
    return done.stderr


@pytest.mark.parametrize("wrong", ["password", "ca", "plaintext"])
def test_the_cli_says_what_to_check_in_one_line(wrong: str, tmp_path: Path) -> None:
    """``jevmem produce`` as an operator would run it against the SASL_SSL cluster, each setting wrong."""
    env = {k: v for k, v in KAFKA_CLIENT.items() if k.startswith("JEVMEM_")}
    env.update({"password": {"JEVMEM_KAFKA_SASL_PASSWORD": "not-the-password"},
                "ca": {"JEVMEM_KAFKA_SSL_CAFILE": KAFKA_CLIENT["KAFKA_CLUSTER_OTHER_CA"]},
                "plaintext": {"JEVMEM_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}}[wrong])
    want = {"password": "check the SASL username, password", "ca": "check JEVMEM_KAFKA_SSL_CAFILE",
            "plaintext": "check JEVMEM_KAFKA_SECURITY_PROTOCOL"}[wrong]
    (tmp_path / "obs.jsonl").write_text(observations(1)[0].model_dump_json() + "\n")
    started = time.monotonic()
    done = jevmem(["produce", "obs.jsonl"], env, tmp_path)
    assert time.monotonic() - started < FAIL_FAST_S  # the README's promise, the interpreter's start included
    assert "not-the-password" not in one_line(done, want)


def test_keys_list_with_a_wrong_elasticsearch_password_says_what_to_check(es_proxy: str, tmp_path: Path) -> None:
    env = {"JEVMEM_MODE": "distributed", "JEVMEM_ELASTICSEARCH_URL": es_proxy, "JEVMEM_ELASTICSEARCH_USERNAME": "jevmem",
           "JEVMEM_ELASTICSEARCH_PASSWORD": "not-the-password", "JEVMEM_ELASTICSEARCH_CA_FILE": str(TLS / "ca.pem")}
    done = jevmem(["keys", "list"], env, tmp_path)
    assert done.returncode == 2
    assert "not-the-password" not in one_line(done, "refused the credentials (HTTP 401)", "JEVMEM_ELASTICSEARCH_PASSWORD")
    done = jevmem(["keys", "list"], {**env, "JEVMEM_ELASTICSEARCH_PASSWORD": PASSWORD,
                                     "JEVMEM_ELASTICSEARCH_CA_FILE": KAFKA_CLIENT["KAFKA_CLUSTER_OTHER_CA"]}, tmp_path)
    one_line(done, "TLS to Elasticsearch", "certificate verify failed", "check JEVMEM_ELASTICSEARCH_CA_FILE")


def test_a_worker_with_a_wrong_password_exits_with_a_clear_error(tmp_path: Path) -> None:
    settings = cluster_settings(ES_URL or "", f"bad{uuid.uuid4().hex[:8]}",
                                kafka_sasl_password=SecretStr("not-the-password"))
    env = {**worker_env(settings), "JEVMEM_WORKER_DATADIR": str(tmp_path / "w")}
    worker = spawn_worker(env, tmp_path / "worker.log")
    try:
        assert worker.wait(60) != 0
    finally:
        stop_workers([worker])
    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert "authentication failed" in log and "not-the-password" not in log
    assert "Traceback" not in log and "%3|" not in log  # one line says it, not a traceback or librdkafka's log
    assert log.splitlines()[-1].startswith("jevmem: kafka ")


def test_an_existing_topic_with_fewer_replicas_is_refused() -> None:
    kafka = cluster_kafka()
    tag = f"rf{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, tag, TopicLayout(partitions=3, replication_factor=1, min_insync_replicas=1))
    with pytest.raises(TopicLayoutError, match="replication factor 1, 3 configured"):
        ensure_topics(kafka, tag, TopicLayout(partitions=3))
    with pytest.raises(TopicLayoutError, match="JEVMEM_PARTITIONS=3"):
        ensure_topics(kafka, tag, TopicLayout(partitions=6, replication_factor=1, min_insync_replicas=1))
    admin = kafka_admin.AdminClient(kafka.librdkafka())
    for fut in admin.delete_topics([f"{tag}.{role}.v1" for role in ("observations",)]).values():
        fut.result()


async def test_elasticsearch_over_https_with_credentials(es_proxy: str) -> None:
    good = cluster_settings(es_proxy, "x")
    es = assembly.elasticsearch(good)
    try:
        assert (await es.info())["version"]["number"]
    finally:
        await es.close()
    with_key = cluster_settings(es_proxy, "x", elasticsearch_username=None, elasticsearch_password=None,
                                elasticsearch_api_key=SecretStr(ES_PROXY_API_KEY))
    es = assembly.elasticsearch(with_key)
    try:
        assert (await es.info())["version"]["number"]
    finally:
        await es.close()
    bad = cluster_settings(es_proxy, "x", elasticsearch_password=SecretStr("not-the-password"))
    es = assembly.elasticsearch(bad)
    try:
        with pytest.raises(AuthenticationException) as err:
            await es.info()
        assert "not-the-password" not in str(err.value)
    finally:
        await es.close()


async def test_qdrant_cluster_over_https_with_an_api_key() -> None:
    url, ca = QDRANT_CLIENT["JEVMEM_QDRANT_URL"], QDRANT_CLIENT["JEVMEM_QDRANT_CA_FILE"]
    key = Path(QDRANT_CLIENT["JEVMEM_QDRANT_API_KEY_FILE"]).read_text().strip()
    assert (await check_server(url, key, ca)).startswith("1.18")
    with pytest.raises(StoreUnavailable, match=r"HTTP 40[13]") as err:
        await check_server(url, "not-the-key", ca)
    assert key not in str(err.value)
    with pytest.raises(StoreUnavailable):
        await check_server(url, key, QDRANT_CLIENT["JEVMEM_QDRANT_CA_FILE"].replace("ca.pem", "other-ca.pem"))


async def test_one_broker_of_three_lost_mid_stream(es_proxy: str) -> None:
    """One short round of ``bench chaos``'s ``broker_loss``: nothing lost or duplicated, the same
    graph as the embedded run, no worker added, and the stream paused only briefly."""
    settings = cluster_settings(es_proxy, "chaos")
    out = await run_chaos(LOCOMO, settings, rounds=1, turns=12, faults=("broker_loss",), stall_s=60.0, timeout_s=300.0)
    result = out["results"][0]
    assert out["passed"] == 1, result
    assert (out["lost"], out["duplicated"], out["stalled"], out["graph_mismatches"]) == (0, 0, 0, 0)
    assert any(d.startswith("SIGKILL broker") for d in result["detail"]), result
    assert result["max_gap_s"] < 30.0, result

