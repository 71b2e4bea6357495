#!/usr/bin/env bash
# Three-broker Apache Kafka cluster (KRaft, every node a combined broker+controller, three JVM
# processes, loopback only) with TLS and SASL, for integration tests and chaos benchmarks.  Same
# jars as scripts/kafka/kafka.sh (Kafka 3.9.2 from Maven Central via scripts/kafka/pom.xml, fetched
# once into the shared cache by `kafka.sh fetch`): no Docker, no Kafka tarball, no ZooKeeper.
#
#   scripts/kafka/cluster.sh start           # jars, certificates, password (once), format storage (once),
#                                            #   start every node not running, wait until each node answers
#                                            #   (SCRAM login + Metadata), lists brokers 1,2,3 and no partition
#                                            #   is under-replicated; writes $KAFKA_CLUSTER_DATA/client.env
#   scripts/kafka/cluster.sh stop            # SIGTERM every node, wait (SIGKILL after KAFKA_CLUSTER_STOP_TIMEOUT)
#   scripts/kafka/cluster.sh status          # one line a node; exit 0 if all 3 ready, 1 if not, 3 if none runs
#   scripts/kafka/cluster.sh restart         # stop + start
#   scripts/kafka/cluster.sh reset           # stop and delete everything this script made (data, TLS, password)
#   scripts/kafka/cluster.sh kill N          # SIGKILL node N (1..3) at once (chaos); waits only for its death
#   scripts/kafka/cluster.sh start-node N    # start node N on its data, wait until it is ready and has rejoined
#                                            #   (every running node lists it; no under-replicated partition
#                                            #   when all three run)
#   scripts/kafka/cluster.sh stop-node N     # graceful stop of node N (SIGTERM: controlled shutdown moves its
#                                            #   leaders away first; SIGKILL after the stop timeout)
#   scripts/kafka/cluster.sh restart-node N  # stop-node N + start-node N (one step of a rolling restart)
#   scripts/kafka/cluster.sh pid N           # print node N's pid (exit 3 if it is not running)
#   scripts/kafka/cluster.sh controller      # print the id of the active KRaft controller (exit 3 if unknown)
#   scripts/kafka/cluster.sh env             # print the client settings (the same lines as client.env)
#   scripts/kafka/cluster.sh logs N [L]      # last L (default 50) lines of node N's log
#
# Environment (all optional):
#   KAFKA_CLUSTER_DATA           everything: nodes' data, configs, logs, pids, TLS, password
#                                (default /tmp/jevmem-kafka-cluster)
#   KAFKA_CLUSTER_BASE_PORT      node i (1..3) listens on 127.0.0.1 at P=BASE+(i-1)*10:
#                                  P    CLIENT      SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN)
#                                  P+1  MTLS        SSL, client certificate required (mutual TLS)
#                                  P+2  INTERNAL    SSL with client certificates, inter-broker traffic
#                                  P+3  CONTROLLER  PLAINTEXT, KRaft quorum (loopback only)
#                                (default 29092: 29092-29095, 29102-29105, 29112-29115)
#   KAFKA_CLUSTER_PASSWORD       password of SASL user `jevmem` (default: random, made once into
#                                $KAFKA_CLUSTER_DATA/password). Letters, digits and ._~@%+:- only. SCRAM
#                                credentials are written at format time: a different password needs reset.
#   KAFKA_CLUSTER_HEAP           JVM heap options per node (default: -Xms128m -Xmx384m)
#   KAFKA_CLUSTER_JVM_OPTS       extra JVM options per node
#   KAFKA_CLUSTER_SESSION_TIMEOUT_MS  broker.session.timeout.ms: a dead broker is fenced (its leaders
#                                moved, it leaves the ISRs) this long after its last heartbeat (default 4000;
#                                heartbeats every 1000 ms)
#                                Measured on 2 cores: acks=all produce stalls ~4-4.6 s after `kill` of a
#                                broker, ~7-9 s when it was the active controller (quorum election ~3 s,
#                                then a full session on the new controller); graceful restarts ~1.5 s.
#   KAFKA_CLUSTER_NUM_PARTITIONS num.partitions for CreateTopics without a count (default 1)
#   KAFKA_CLUSTER_EXTRA_CONFIG   a file of server.properties lines appended to every node's config
#                                (later lines win), e.g. controller.quorum.fetch.timeout.ms=1000
#   KAFKA_CLUSTER_START_TIMEOUT  seconds to wait for the cluster or a node to be ready (default 120)
#   KAFKA_CLUSTER_STOP_TIMEOUT   seconds to wait for a clean shutdown before SIGKILL (default 30)
#   KAFKA_CACHE, MVN             jar cache and Maven, as for kafka.sh (the jar fetch is `kafka.sh fetch`)
#   JAVA, PYTHON                 executables (default: $JAVA_HOME/bin/java or java; python3, stdlib only)
#
# TLS ($KAFKA_CLUSTER_DATA/tls, made once with openssl): ca.pem/ca.key (self-signed CA), server.pem/
# server.key and broker.p12 (PKCS12 keystore, password in keystore.password): one server certificate
# for all brokers, SAN IP:127.0.0.1 + DNS:localhost, serverAuth+clientAuth (it is also the brokers'
# client identity on INTERNAL); client.pem/client.key (CN=jevmem-client, clientAuth, for MTLS);
# other-ca.pem (an unrelated CA, for "unknown CA" tests). Brokers trust ca.pem (PEM truststore).
# No authorizer: every authenticated principal may do everything.
#
# Clients: eval "$(scripts/kafka/cluster.sh env)" (or source $KAFKA_CLUSTER_DATA/client.env) exports
# JEVMEM_KAFKA_BOOTSTRAP (the 3 SASL_SSL addresses), JEVMEM_KAFKA_SECURITY_PROTOCOL=SASL_SSL,
# JEVMEM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512, JEVMEM_KAFKA_SASL_USERNAME=jevmem,
# JEVMEM_KAFKA_SASL_PASSWORD_FILE, JEVMEM_KAFKA_SSL_CAFILE, KAFKA_CLUSTER_MTLS_BOOTSTRAP,
# KAFKA_CLUSTER_CLIENT_CERT, KAFKA_CLUSTER_CLIENT_KEY, KAFKA_CLUSTER_OTHER_CA.
#
# Cluster defaults: default.replication.factor=3, min.insync.replicas=2, internal topics RF 3
# (transaction log min ISR 2), auto.create.topics.enable=false, group.initial.rebalance.delay.ms=0.
# Readiness is checked with the Python stdlib only (ssl + hashlib: SCRAM-SHA-512 over SASL_SSL, then
# Metadata v1; ApiVersions over MTLS with the client certificate), so the check needs no client library.
# No pipe here feeds a reader that exits early (grep -q, head): under pipefail the writer's SIGPIPE
# would fail the script.  The password is on no command line except StorageTool's at first format.
set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="${KAFKA_CLUSTER_DATA:-/tmp/jevmem-kafka-cluster}"
[[ "$DATA" == /* ]] || DATA="$PWD/$DATA"   # configs and client.env hold absolute paths
BASE_PORT="${KAFKA_CLUSTER_BASE_PORT:-29092}"
HEAP="${KAFKA_CLUSTER_HEAP:--Xms128m -Xmx384m}"
JVM_OPTS="${KAFKA_CLUSTER_JVM_OPTS:-}"
SESSION_TIMEOUT_MS="${KAFKA_CLUSTER_SESSION_TIMEOUT_MS:-4000}"
NUM_PARTITIONS="${KAFKA_CLUSTER_NUM_PARTITIONS:-1}"
EXTRA_CONFIG="${KAFKA_CLUSTER_EXTRA_CONFIG:-}"
START_TIMEOUT="${KAFKA_CLUSTER_START_TIMEOUT:-120}"
STOP_TIMEOUT="${KAFKA_CLUSTER_STOP_TIMEOUT:-30}"
if [[ -z "${JAVA:-}" ]]; then
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi
fi
PYTHON="${PYTHON:-python3}"

HOST=127.0.0.1
NODES=(1 2 3)
SASL_USER=jevmem
TLS="$DATA/tls"
PASSWORD_FILE="$DATA/password"
CLUSTER_ID_FILE="$DATA/cluster.id"
CLIENT_ENV="$DATA/client.env"
LOG4J="$DATA/log4j.properties"

log() { echo "cluster.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if ! [[ "$BASE_PORT" =~ ^[0-9]+$ ]] || (( BASE_PORT < 1024 || BASE_PORT + 23 > 65535 )); then
  die "KAFKA_CLUSTER_BASE_PORT must be a number in 1024..65512 (got '$BASE_PORT')"
fi
[[ "$SESSION_TIMEOUT_MS" =~ ^[0-9]+$ ]] || die "KAFKA_CLUSTER_SESSION_TIMEOUT_MS must be a number"
[[ "$START_TIMEOUT" =~ ^[0-9]+$ && "$STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "timeouts must be whole seconds"
[[ -z "$EXTRA_CONFIG" || -r "$EXTRA_CONFIG" ]] || die "KAFKA_CLUSTER_EXTRA_CONFIG=$EXTRA_CONFIG is not a readable file"

# ------------------------------------------------------------- layout -----
port_client()     { echo $(( BASE_PORT + ($1 - 1) * 10 )); }
port_mtls()       { echo $(( BASE_PORT + ($1 - 1) * 10 + 1 )); }
port_internal()   { echo $(( BASE_PORT + ($1 - 1) * 10 + 2 )); }
port_controller() { echo $(( BASE_PORT + ($1 - 1) * 10 + 3 )); }
node_dir()    { echo "$DATA/node$1"; }
node_config() { echo "$DATA/node$1/server.properties"; }
node_log()    { echo "$DATA/node$1/kafka.log"; }
node_pidfile(){ echo "$DATA/node$1/kafka.pid"; }
node_logdirs(){ echo "$DATA/node$1/data"; }   # log.dirs, also the KRaft metadata log

check_node_arg() {
  [[ "${1:-}" =~ ^[1-3]$ ]] || { echo "usage: $0 ${2:-CMD} N   (N = 1, 2 or 3)" >&2; exit 2; }
}

# ------------------------------------------------------------- process ----
# true if $1 is a live kafka.Kafka process of node $2 (guards against pid reuse; a zombie's
# cmdline is empty, so a killed node not yet reaped by its parent counts as dead)
is_node_pid() {
  local pid="$1" node="$2" cmdline
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *kafka.Kafka* && "$cmdline" == *"$(node_config "$node")"* ]] || return 1
  fi
  return 0
}

read_pid() {
  local f
  f="$(node_pidfile "$1")"
  if [[ -f "$f" ]]; then tr -dc '0-9' <"$f" || true; fi
}

running_pid() {
  local pid
  pid="$(read_pid "$1")"
  if is_node_pid "$pid" "$1"; then echo "$pid"; return 0; fi
  return 1
}

running_nodes() {  # space-separated ids of the nodes whose process is alive
  local n ids=()
  for n in "${NODES[@]}"; do running_pid "$n" >/dev/null && ids+=("$n"); done
  echo "${ids[*]}"
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

lock() {
  mkdir -p "$DATA"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$DATA/.lock"
    flock -w 300 9 || die "could not lock $DATA/.lock"
  fi
}

log_tail() {
  local n="$1" lines="${2:-60}" f
  f="$(node_log "$n")"
  if [[ -f "$f" ]]; then
    log "---- node $n: last $lines lines of $f ----"
    tail -n "$lines" "$f" >&2 || true
    log "---- end of node $n log ----"
  fi
}

# SIGTERM the given nodes together, wait up to STOP_TIMEOUT, SIGKILL what is left.
stop_nodes() {
  local n pid i alive
  local -A pids=()
  for n in "$@"; do
    if pid="$(running_pid "$n")"; then pids[$n]="$pid"; else rm -f "$(node_pidfile "$n")"; fi
  done
  (( ${#pids[@]} )) || { log "node(s) $* not running"; return 0; }
  for n in "${!pids[@]}"; do
    log "stopping node $n (pid ${pids[$n]})"
    kill -TERM "${pids[$n]}" 2>/dev/null || true
  done
  for (( i = 0; i < STOP_TIMEOUT * 4; i++ )); do
    alive=0
    for n in "${!pids[@]}"; do is_node_pid "${pids[$n]}" "$n" && alive=1; done
    (( alive )) || break
    sleep 0.25
  done
  for n in "${!pids[@]}"; do
    if is_node_pid "${pids[$n]}" "$n"; then
      log "node $n: no clean shutdown within ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "${pids[$n]}" 2>/dev/null || true
    fi
  done
  for n in "${!pids[@]}"; do
    for (( i = 0; i < 40; i++ )); do
      is_node_pid "${pids[$n]}" "$n" || break
      sleep 0.25
    done
    is_node_pid "${pids[$n]}" "$n" && die "node $n (pid ${pids[$n]}) still alive after SIGKILL"
    rm -f "$(node_pidfile "$n")"
    log "node $n stopped"
  done
}

# ------------------------------------------------------------- secrets ----
ensure_password() {
  local pw stored=""
  [[ -f "$PASSWORD_FILE" ]] && stored="$(tr -d '\n' <"$PASSWORD_FILE")"
  if [[ -n "${KAFKA_CLUSTER_PASSWORD:-}" ]]; then
    pw="$KAFKA_CLUSTER_PASSWORD"
    [[ "$pw" =~ ^[A-Za-z0-9._~@%+:-]+$ ]] \
      || die "KAFKA_CLUSTER_PASSWORD may hold only letters, digits and ._~@%+:- (it goes into JAAS and --add-scram)"
    if [[ -n "$stored" && "$stored" != "$pw" ]] && ls "$DATA"/node*/data/meta.properties >/dev/null 2>&1; then
      die "KAFKA_CLUSTER_PASSWORD differs from the password the storage was formatted with ($PASSWORD_FILE); run reset first"
    fi
    [[ "$stored" == "$pw" ]] && return 0
  elif [[ -n "$stored" ]]; then
    return 0
  else
    pw="$(openssl rand -hex 16)"
  fi
  (umask 077 && printf '%s\n' "$pw" >"$PASSWORD_FILE.tmp")
  mv -f "$PASSWORD_FILE.tmp" "$PASSWORD_FILE"
}

password() { tr -d '\n' <"$PASSWORD_FILE"; }

# Self-signed CA, one server certificate for every broker, a client certificate, an unrelated CA.
ensure_certs() {
  [[ -f "$TLS/.complete" ]] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl not found"
  local tmp kspw rc
  mkdir -p "$DATA"
  tmp="$(mktemp -d "$DATA/.tls.XXXXXX")"
  log "making certificates in $TLS"
  # a plain subshell (not the left side of ||, where bash would ignore set -e inside it)
  set +e
  (
    set -euo pipefail
    cd "$tmp"
    umask 077
    cat >openssl.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
EOF
    mkca() {  # $1 = file prefix, $2 = CN
      openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 3650 -config openssl.cnf \
        -extensions ca -subj "/CN=$2" -keyout "$1.key" -out "$1.pem" 2>/dev/null
    }
    mkleaf() {  # $1 = file prefix, $2 = CN, $3 = extension section
      openssl req -new -newkey rsa:2048 -nodes -sha256 -config openssl.cnf -subj "/CN=$2" \
        -keyout "$1.key" -out "$1.csr" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 12)" \
        -days 3650 -sha256 -extfile openssl.cnf -extensions "$3" -out "$1.pem" 2>/dev/null
      rm -f "$1.csr"
    }
    mkca ca "jevmem test CA"
    mkca other-ca "jevmem unrelated CA"
    rm -f other-ca.key
    mkleaf server localhost server
    mkleaf client jevmem-client client
    openssl verify -CAfile ca.pem server.pem client.pem >/dev/null
    openssl rand -hex 16 >keystore.password
    kspw="$(cat keystore.password)"
    openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name broker \
      -out broker.p12 -passout "pass:$kspw"
    rm -f openssl.cnf
    # clients (other users, containers) read the public PEMs and the client key
    chmod 644 ca.pem other-ca.pem server.pem client.pem
    chmod 600 client.key
  )
  rc=$?
  set -e
  (( rc == 0 )) || { rm -rf "$tmp"; die "making certificates failed (openssl, rc $rc)"; }
  if command -v keytool >/dev/null 2>&1; then
    keytool -list -storetype PKCS12 -keystore "$tmp/broker.p12" -storepass "$(cat "$tmp/keystore.password")" \
      >/dev/null 2>&1 || { rm -rf "$tmp"; die "Java cannot read the PKCS12 keystore openssl wrote"; }
  fi
  touch "$tmp/.complete"
  rm -rf "$TLS"
  mv "$tmp" "$TLS"
  chmod 755 "$TLS"
}

# ------------------------------------------------------------- config -----
write_configs() {
  local n voters="" sep=""
  for n in "${NODES[@]}"; do voters+="${sep}${n}@${HOST}:$(port_controller "$n")"; sep=","; done
  for n in "${NODES[@]}"; do
    mkdir -p "$(node_logdirs "$n")"
    (umask 077 && cat >"$(node_config "$n").tmp" <<EOF
# Generated by scripts/kafka/cluster.sh -- rewritten on every start.
process.roles=broker,controller
node.id=${n}
controller.quorum.voters=${voters}
listeners=CLIENT://${HOST}:$(port_client "$n"),MTLS://${HOST}:$(port_mtls "$n"),INTERNAL://${HOST}:$(port_internal "$n"),CONTROLLER://${HOST}:$(port_controller "$n")
advertised.listeners=CLIENT://${HOST}:$(port_client "$n"),MTLS://${HOST}:$(port_mtls "$n"),INTERNAL://${HOST}:$(port_internal "$n")
listener.security.protocol.map=CLIENT:SASL_SSL,MTLS:SSL,INTERNAL:SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=INTERNAL
controller.listener.names=CONTROLLER
log.dirs=$(node_logdirs "$n")

# TLS: one keystore for every listener; brokers trust the test CA only
ssl.keystore.type=PKCS12
ssl.keystore.location=${TLS}/broker.p12
ssl.keystore.password=$(cat "$TLS/keystore.password")
ssl.key.password=$(cat "$TLS/keystore.password")
ssl.truststore.type=PEM
ssl.truststore.location=${TLS}/ca.pem
ssl.endpoint.identification.algorithm=https
listener.name.mtls.ssl.client.auth=required
listener.name.internal.ssl.client.auth=required

# SASL on CLIENT: SCRAM credentials live in the metadata log (added at format time), PLAIN in JAAS
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.client.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_${SASL_USER}="$(password)";

# a dead broker is fenced (leaders moved, removed from ISRs) after the session timeout
broker.session.timeout.ms=${SESSION_TIMEOUT_MS}
broker.heartbeat.interval.ms=1000

# replication: every topic on all three brokers, acks=all needs two of them
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
unclean.leader.election.enable=false

auto.create.topics.enable=false
num.partitions=${NUM_PARTITIONS}
delete.topic.enable=true
group.initial.rebalance.delay.ms=0

# small footprint: three JVMs share a 2-core machine
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.retention.hours=24
EOF
      if [[ -n "$EXTRA_CONFIG" ]]; then
        printf '\n# from KAFKA_CLUSTER_EXTRA_CONFIG=%s (later lines win)\n' "$EXTRA_CONFIG"
        cat "$EXTRA_CONFIG"
      fi >>"$(node_config "$n").tmp"
    )
    mv -f "$(node_config "$n").tmp" "$(node_config "$n")"
  done

  cp "$HERE/log4j.properties" "$LOG4J"
}

format_storage() {  # $1 = classpath; formats every node that has no meta.properties yet
  local cp="$1" cid n pw
  if [[ -s "$CLUSTER_ID_FILE" ]]; then
    cid="$(cat "$CLUSTER_ID_FILE")"
  else
    cid="$("$JAVA" -cp "$cp" -Dlog4j.configuration="file:$LOG4J" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    [[ -n "$cid" ]] || die "kafka.tools.StorageTool random-uuid printed nothing"
    echo "$cid" >"$CLUSTER_ID_FILE"
  fi
  pw="$(password)"
  for n in "${NODES[@]}"; do
    [[ -f "$(node_logdirs "$n")/meta.properties" ]] && continue
    log "formatting node $n storage in $(node_logdirs "$n") (cluster id $cid, SCRAM user $SASL_USER)"
    "$JAVA" -cp "$cp" -Dlog4j.configuration="file:$LOG4J" kafka.tools.StorageTool format \
        -t "$cid" -c "$(node_config "$n")" --ignore-formatted \
        --add-scram "SCRAM-SHA-512=[name=${SASL_USER},password=\"${pw}\"]" \
        --add-scram "SCRAM-SHA-256=[name=${SASL_USER},password=\"${pw}\"]" \
        >"$(node_dir "$n")/format.log" 2>&1 \
      || { cat "$(node_dir "$n")/format.log" >&2; die "kafka.tools.StorageTool format failed for node $n"; }
  done
}

# KEY=value for sh and for dotenv-style readers: plain when the value is safe, else single-quoted
env_line() {
  if [[ "$2" =~ ^[A-Za-z0-9_./:,@%+=-]*$ ]]; then
    printf 'export %s=%s\n' "$1" "$2"
  else
    printf "export %s='%s'\n" "$1" "${2//\'/\'\\\'\'}"
  fi
}

client_env() {
  local n boot="" mtls="" sep=""
  for n in "${NODES[@]}"; do
    boot+="${sep}${HOST}:$(port_client "$n")"; mtls+="${sep}${HOST}:$(port_mtls "$n")"; sep=","
  done
  env_line JEVMEM_KAFKA_BOOTSTRAP "$boot"
  env_line JEVMEM_KAFKA_SECURITY_PROTOCOL SASL_SSL
  env_line JEVMEM_KAFKA_SASL_MECHANISM SCRAM-SHA-512
  env_line JEVMEM_KAFKA_SASL_USERNAME "$SASL_USER"
  env_line JEVMEM_KAFKA_SASL_PASSWORD_FILE "$PASSWORD_FILE"
  env_line JEVMEM_KAFKA_SSL_CAFILE "$TLS/ca.pem"
  env_line KAFKA_CLUSTER_MTLS_BOOTSTRAP "$mtls"
  env_line KAFKA_CLUSTER_CLIENT_CERT "$TLS/client.pem"
  env_line KAFKA_CLUSTER_CLIENT_KEY "$TLS/client.key"
  env_line KAFKA_CLUSTER_OTHER_CA "$TLS/other-ca.pem"
}

# --------------------------------------------------------- readiness ------
# Stdlib-only Kafka protocol check of every node given as ID:CLIENT_PORT:MTLS_PORT. CLIENT: TLS
# (verified against ca.pem, hostname 127.0.0.1), SaslHandshake v1 + SaslAuthenticate v0 with
# SCRAM-SHA-512, then Metadata v1 (all topics). MTLS: TLS with the client certificate, ApiVersions v0.
# Mode check: one line a node; exit 0 if every node answers, lists exactly the brokers in EXPECT (comma-separated
# ids) and, with URP=1, reports no partition without a leader or with an ISR smaller than its replicas.
# Mode controller: print "LEADER EPOCH" of the KRaft quorum (DescribeQuorum v0) from the first node
# that answers.
cluster_check() {  # MODE(check|controller) EXPECT URP SPEC...
  command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (the readiness check needs the Python stdlib)"
  "$PYTHON" - "$HOST" "$TLS/ca.pem" "$TLS/client.pem" "$TLS/client.key" "$SASL_USER" "$PASSWORD_FILE" "$@" <<'PY'
import base64, hashlib, hmac, os, socket, ssl, struct, sys

host, cafile, certfile, keyfile, user, pwfile, mode, expect, urp_required = sys.argv[1:10]
specs = sys.argv[10:]
expect = sorted(int(x) for x in expect.split(",") if x)
with open(pwfile) as f:
    password = f.read().strip()

class Conn:
    def __init__(self, port, client_cert):
        ctx = ssl.create_default_context(cafile=cafile)
        if client_cert:
            ctx.load_cert_chain(certfile, keyfile)
        raw = socket.create_connection((host, port), timeout=5)
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        self.sock.settimeout(5)
        self.corr = 0
    def recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed")
            buf += chunk
        return buf
    def call(self, api_key, version, body=b"", flexible=False):
        self.corr += 1
        cid = b"cluster.sh"
        msg = struct.pack(">hhih", api_key, version, self.corr, len(cid)) + cid
        msg += (b"\0" if flexible else b"") + body  # request header v2: empty tagged fields
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        data = self.recv(struct.unpack(">i", self.recv(4))[0])
        if struct.unpack(">i", data[:4])[0] != self.corr:
            raise ValueError("bad correlation id")
        return data[5:] if flexible else data[4:]   # response header v1: (empty) tagged fields
    def close(self):
        self.sock.close()

class Reader:
    def __init__(self, b): self.b, self.o = b, 0
    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]; self.o += struct.calcsize(fmt); return v
    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.b[self.o:self.o + n].decode(); self.o += n; return s
    def bytes_(self):
        n = self.take(">i")
        if n < 0:
            return None
        s = self.b[self.o:self.o + n]; self.o += n; return s

def kstr(s): b = s.encode(); return struct.pack(">h", len(b)) + b
def kbytes(b): return struct.pack(">i", len(b)) + b

def authenticate(conn, data):
    r = Reader(conn.call(36, 0, kbytes(data)))       # SaslAuthenticate v0
    err, msg, auth = r.take(">h"), r.string(), r.bytes_()
    if err:
        raise ValueError("SaslAuthenticate error %d: %s" % (err, msg))
    return auth

def scram_sha512(conn):
    r = Reader(conn.call(17, 1, kstr("SCRAM-SHA-512")))  # SaslHandshake v1
    err = r.take(">h")
    if err:
        raise ValueError("SaslHandshake error %d" % err)
    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = "n=%s,r=%s" % (user, nonce)
    server_first = authenticate(conn, ("n,," + first_bare).encode()).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    if not attrs["r"].startswith(nonce):
        raise ValueError("SCRAM: server nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    final_bare = "c=biws,r=%s" % attrs["r"]
    auth_msg = ("%s,%s,%s" % (first_bare, server_first, final_bare)).encode()
    sig = hmac.new(hashlib.sha512(client_key).digest(), auth_msg, "sha512").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
    server_final = authenticate(conn, ("%s,p=%s" % (final_bare, proof)).encode()).decode()
    server_sig = hmac.new(hmac.new(salted, b"Server Key", "sha512").digest(), auth_msg, "sha512").digest()
    if server_final != "v=" + base64.b64encode(server_sig).decode():
        raise ValueError("SCRAM: bad server signature")

def metadata(conn):
    r = Reader(conn.call(3, 1, struct.pack(">i", -1)))  # Metadata v1, all topics
    brokers = []
    for _ in range(r.take(">i")):
        node = r.take(">i"); r.string(); r.take(">i"); r.string()
        brokers.append(node)
    r.take(">i")                                       # controller id (any broker in KRaft)
    parts = bad = 0
    for _ in range(r.take(">i")):
        r.take(">h"); r.string(); r.take(">b")
        for _ in range(r.take(">i")):
            perr = r.take(">h"); r.take(">i"); leader = r.take(">i")
            replicas = [r.take(">i") for _ in range(r.take(">i"))]
            isr = [r.take(">i") for _ in range(r.take(">i"))]
            parts += 1
            if perr or leader < 0 or len(isr) < len(replicas):
                bad += 1
    return sorted(brokers), parts, bad

def active_controller(conn):
    # DescribeQuorum v0 (flexible; brokers forward it to the active controller)
    name = b"__cluster_metadata"
    body = b"\x02" + bytes([len(name) + 1]) + name + b"\x02" + struct.pack(">i", 0) + b"\0\0\0"
    r = Reader(conn.call(55, 0, body, flexible=True))
    if r.take(">h"):
        raise ValueError("DescribeQuorum error")
    r.take(">b"); n = r.take(">b"); r.o += n - 1     # topics (1), topic name (compact string)
    r.take(">b"); r.take(">i")                       # partitions (1), partition index
    if r.take(">h"):
        raise ValueError("DescribeQuorum partition error")
    return r.take(">i"), r.take(">i")                # leader id, leader epoch

if mode == "controller":
    for spec in specs:
        node, cport, mport = (int(x) for x in spec.split(":"))
        try:
            c = Conn(cport, False)
            try:
                scram_sha512(c)
                leader, epoch = active_controller(c)
            finally:
                c.close()
            if leader >= 0:
                print("%d %d" % (leader, epoch))
                sys.exit(0)
        except Exception as e:  # noqa: BLE001
            print("node %d: %s: %s" % (node, type(e).__name__, e), file=sys.stderr)
    sys.exit(1)

ok = True
for spec in specs:
    node, cport, mport = (int(x) for x in spec.split(":"))
    try:
        c = Conn(cport, False)
        try:
            scram_sha512(c)
            brokers, parts, bad = metadata(c)
        finally:
            c.close()
        m = Conn(mport, True)
        try:
            r = m.call(18, 0)                              # ApiVersions v0
            if struct.unpack(">h", r[:2])[0]:
                raise ValueError("ApiVersions error on MTLS")
        finally:
            m.close()
        why = []
        if brokers != expect:
            why.append("expected brokers %s" % ",".join(map(str, expect)))
        if urp_required == "1" and bad:
            why.append("partitions under-replicated or leaderless")
        ok = ok and not why
        print("node %d: %s brokers=%s partitions=%d under-replicated=%d (SASL_SSL :%d SCRAM ok, MTLS :%d ok)"
              % (node, "not ready (%s):" % "; ".join(why) if why else "ready", ",".join(map(str, brokers)),
                 parts, bad, cport, mport))
    except Exception as e:  # noqa: BLE001
        ok = False
        print("node %d: not answering: %s: %s" % (node, type(e).__name__, e))
sys.exit(0 if ok else 1)
PY
}

check_running() {  # URP: check every running node, expecting exactly the running set as brokers
  local urp="$1" n specs=() expect
  expect="$(running_nodes)"
  [[ -n "$expect" ]] || return 3
  for n in $expect; do specs+=("$n:$(port_client "$n"):$(port_mtls "$n")"); done
  # under-replication only matters (and only clears) when all three run
  [[ "$expect" == "1 2 3" ]] || urp=0
  cluster_check check "${expect// /,}" "$urp" "${specs[@]}"
}

# Wait until every running node is ready (see check_running). $1 = what is being waited for,
# rest = the nodes started by this call: on their death or a timeout they are stopped and logged.
wait_ready() {
  local what="$1" deadline out="" rc n pid t0 ms
  shift
  t0=$(date +%s%N)
  deadline=$(( t0 / 1000000000 + START_TIMEOUT ))
  while :; do
    for n in "$@"; do
      if ! pid="$(running_pid "$n")"; then
        rm -f "$(node_pidfile "$n")"
        log "ERROR: node $n exited during startup"
        log_tail "$n"
        exit 1
      fi
    done
    rc=0
    out="$(check_running 1 2>&1)" || rc=$?
    if (( rc == 0 )); then
      printf '%s\n' "$out" >&2
      ms=$(( ($(date +%s%N) - t0) / 1000000 ))
      log "$what ready in $(( ms / 1000 )).$(( ms % 1000 / 100 ))s"
      return 0
    fi
    if (( $(date +%s) >= deadline )); then
      printf '%s\n' "$out" >&2
      for n in "$@"; do log_tail "$n" 40; done
      if (( $# )); then
        log "ERROR: $what not ready within ${START_TIMEOUT}s; stopping node(s) $* started by this call"
        STOP_TIMEOUT=5 stop_nodes "$@" || true
      else
        log "ERROR: $what not ready within ${START_TIMEOUT}s"
      fi
      exit 1
    fi
    sleep 0.5
  done
}

# ------------------------------------------------------------ commands ----
prepare() {  # everything a node needs before its JVM starts; prints the classpath
  local libs
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (set JAVA or JAVA_HOME)"
  command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (the readiness check needs it)"
  libs="$(bash "$HERE/kafka.sh" fetch)" || die "fetching the Kafka jars failed"
  [[ -d "$libs" ]] || die "kafka.sh fetch printed no jar directory"
  ensure_password
  ensure_certs
  write_configs
  format_storage "$libs/*"
  client_env >"$CLIENT_ENV.tmp" && mv -f "$CLIENT_ENV.tmp" "$CLIENT_ENV"
  echo "$libs/*"
}

check_ports_free() {  # $@ = nodes about to start
  local n p
  for n in "$@"; do
    for p in "$(port_client "$n")" "$(port_mtls "$n")" "$(port_internal "$n")" "$(port_controller "$n")"; do
      if port_open "$HOST" "$p"; then
        die "port ${HOST}:$p of node $n is already in use by another process (not a node of $DATA)"
      fi
    done
  done
}

launch_node() {  # $1 = node, $2 = classpath
  local n="$1" cp="$2" pid logf
  logf="$(node_log "$n")"
  [[ -f "$logf" ]] && mv -f "$logf" "$logf.1"
  log "starting node $n: SASL_SSL :$(port_client "$n"), MTLS :$(port_mtls "$n"), INTERNAL :$(port_internal "$n"), CONTROLLER :$(port_controller "$n") (log $logf)"
  # setsid: own session, so the node survives the calling shell and is not hit by the caller's
  # Ctrl-C; $! is the java pid (setsid execs in place). 9>&-: the JVM must not hold the lock.
  # shellcheck disable=SC2086
  setsid nohup "$JAVA" $HEAP \
      -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent \
      -XX:+ExitOnOutOfMemoryError \
      -Djava.awt.headless=true \
      -Dlog4j.configuration="file:$LOG4J" \
      $JVM_OPTS \
      -cp "$cp" kafka.Kafka "$(node_config "$n")" \
      </dev/null >"$logf" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$(node_pidfile "$n")"
}

cmd_start() {
  local cp n started=()
  lock
  cp="$(prepare)"
  for n in "${NODES[@]}"; do
    running_pid "$n" >/dev/null || started+=("$n")
  done
  if (( ${#started[@]} )); then
    check_ports_free "${started[@]}"
    for n in "${started[@]}"; do launch_node "$n" "$cp"; done
  else
    log "all nodes already running"
  fi
  wait_ready "cluster (brokers $(running_nodes))" "${started[@]}"
  log "bootstrap (SASL_SSL): ${HOST}:$(port_client 1),${HOST}:$(port_client 2),${HOST}:$(port_client 3); client settings: $CLIENT_ENV"
}

cmd_start_node() {
  local n="$1" cp pid
  lock
  if pid="$(running_pid "$n")"; then
    log "node $n already running (pid $pid)"
  else
    cp="$(prepare)"
    check_ports_free "$n"
    launch_node "$n" "$cp"
  fi
  wait_ready "node $n (brokers $(running_nodes))" "$n"
}

cmd_stop() { lock; stop_nodes "${NODES[@]}"; }

cmd_stop_node() { lock; stop_nodes "$1"; }

cmd_restart_node() {
  local n="$1" cp
  lock
  cp="$(prepare)"
  stop_nodes "$n"
  check_ports_free "$n"
  launch_node "$n" "$cp"
  wait_ready "node $n (brokers $(running_nodes))" "$n"
}

cmd_kill() {  # no lock: chaos must not wait behind a start in progress
  local n="$1" pid i
  if ! pid="$(running_pid "$n")"; then log "node $n not running"; return 0; fi
  kill -KILL "$pid" 2>/dev/null || true
  for (( i = 0; i < 200; i++ )); do
    is_node_pid "$pid" "$n" || break
    sleep 0.05
  done
  is_node_pid "$pid" "$n" && die "node $n (pid $pid) still alive 10s after SIGKILL"
  rm -f "$(node_pidfile "$n")"
  log "node $n (pid $pid) killed"
}

cmd_status() {
  local n pid out rc=0 any=0
  for n in "${NODES[@]}"; do
    if pid="$(running_pid "$n")"; then
      any=1
      echo "node $n: running, pid $pid"
    else
      echo "node $n: not running"
      rc=1
    fi
  done
  (( any )) || { echo "not running"; return 3; }
  out="$(check_running 1)" || rc=1
  printf '%s\n' "$out"
  if out="$(active_controller 2>/dev/null)"; then
    echo "active controller: node ${out%% *} (epoch ${out##* })"
  else
    echo "active controller: unknown"
  fi
  return "$rc"
}

active_controller() {  # prints "ID EPOCH" of the active KRaft controller
  local n specs=()
  for n in $(running_nodes); do specs+=("$n:$(port_client "$n"):$(port_mtls "$n")"); done
  (( ${#specs[@]} )) || return 3
  cluster_check controller "" 0 "${specs[@]}"
}

cmd_controller() {
  local out
  if out="$(active_controller)"; then echo "${out%% *}"; return 0; fi
  log "no running node knows the active controller"
  return 3
}

cmd_pid() {
  local pid
  if pid="$(running_pid "$1")"; then echo "$pid"; return 0; fi
  log "node $1 not running"
  return 3
}

cmd_reset() {
  local n
  cmd_stop
  # delete only what this script creates, never the whole of an arbitrary dir
  for n in "${NODES[@]}"; do rm -rf "$(node_dir "$n")"; done
  rm -rf "$TLS" "$DATA"/.tls.* "$PASSWORD_FILE" "$PASSWORD_FILE.tmp" "$CLUSTER_ID_FILE" \
         "$CLIENT_ENV" "$CLIENT_ENV.tmp" "$LOG4J"
  log "data removed from $DATA"
}

case "${1:-}" in
  start)        cmd_start ;;
  stop)         cmd_stop ;;
  status)       cmd_status ;;
  restart)      cmd_stop; cmd_start ;;
  reset)        cmd_reset ;;
  kill)         check_node_arg "${2:-}" kill; cmd_kill "$2" ;;
  start-node)   check_node_arg "${2:-}" start-node; cmd_start_node "$2" ;;
  stop-node)    check_node_arg "${2:-}" stop-node; cmd_stop_node "$2" ;;
  restart-node) check_node_arg "${2:-}" restart-node; cmd_restart_node "$2" ;;
  pid)          check_node_arg "${2:-}" pid; cmd_pid "$2" ;;
  controller)   cmd_controller ;;
  env)          client_env ;;
  logs)         check_node_arg "${2:-}" logs; tail -n "${3:-50}" "$(node_log "$2")" ;;
  *) echo "usage: $0 start|stop|status|restart|reset|kill N|start-node N|stop-node N|restart-node N|pid N|controller|env|logs N [L]" >&2
     exit 2 ;;
esac
