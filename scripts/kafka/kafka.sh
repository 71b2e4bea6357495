#!/usr/bin/env bash
# Single-node Apache Kafka broker (KRaft, combined broker+controller) run
# straight from Maven Central jars: no Docker, no Kafka tarball, no ZooKeeper.
#
#   scripts/kafka/kafka.sh start     # fetch jars (once), format storage (once), start, wait until ready
#   scripts/kafka/kafka.sh stop      # stop via pid file and wait
#   scripts/kafka/kafka.sh status    # exit 0 if running and answering, 3 if not running
#   scripts/kafka/kafka.sh restart
#   scripts/kafka/kafka.sh fetch     # only fetch the jars into the cache (e.g. to warm a CI cache)
#   scripts/kafka/kafka.sh reset     # stop and delete the data dir (topics, offsets, cluster id)
#
# Environment (all optional):
#   KAFKA_CACHE            jar cache root          (default: $HOME/.cache/jevmem-kafka)
#   KAFKA_DATA             data/config/log/pid dir (default: /tmp/jevmem-kafka)
#   KAFKA_HOST             listener host           (default: 127.0.0.1)
#   KAFKA_PORT             client listener port    (default: 9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port   (default: 9093)
#   KAFKA_NUM_PARTITIONS   default partitions for auto-created topics (default: 1)
#   KAFKA_HEAP_OPTS        (default: -Xms128m -Xmx512m)
#   KAFKA_JVM_OPTS         extra JVM options
#   KAFKA_START_TIMEOUT    seconds to wait for readiness (default: 90)
#   KAFKA_STOP_TIMEOUT     seconds to wait for a clean shutdown before SIGKILL (default: 30)
#   JAVA, MVN, PYTHON      executables (default: $JAVA_HOME/bin/java or java, mvn, python3)
#
# Bootstrap servers for clients: ${KAFKA_HOST}:${KAFKA_PORT} (127.0.0.1:9092 by default).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"

KAFKA_CACHE="${KAFKA_CACHE:-$HOME/.cache/jevmem-kafka}"
KAFKA_DATA="${KAFKA_DATA:-/tmp/jevmem-kafka}"
KAFKA_HOST="${KAFKA_HOST:-127.0.0.1}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_NUM_PARTITIONS="${KAFKA_NUM_PARTITIONS:-1}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}"
KAFKA_JVM_OPTS="${KAFKA_JVM_OPTS:-}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
if [[ -z "${JAVA:-}" ]]; then
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi
fi
MVN="${MVN:-mvn}"
PYTHON="${PYTHON:-python3}"

LOG_DIRS="$KAFKA_DATA/logs"          # Kafka data (log.dirs); also holds the KRaft metadata log
CONFIG="$KAFKA_DATA/server.properties"
LOG4J="$KAFKA_DATA/log4j.properties"
LOGFILE="$KAFKA_DATA/kafka.log"      # broker stdout/stderr (log4j writes to stdout)
PIDFILE="$KAFKA_DATA/kafka.pid"
CLUSTER_ID_FILE="$KAFKA_DATA/cluster.id"

log() { echo "kafka.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- jars ----
# The cache directory is keyed by the pom's hash, so changing the Kafka version
# in pom.xml fetches a fresh classpath instead of mixing jars.
libs_dir() {
  local h
  h="$(sha256sum "$POM" | cut -c1-12)"
  echo "$KAFKA_CACHE/libs-$h"
}

fetch_jars() {
  local dir tmp
  dir="$(libs_dir)"
  if [[ -f "$dir/.complete" ]]; then
    echo "$dir"
    return 0
  fi
  command -v "$MVN" >/dev/null 2>&1 || die "'$MVN' not found; Maven is needed to fetch the Kafka jars"
  mkdir -p "$KAFKA_CACHE"
  # One fetch at a time: on a machine without the cache, the single broker and the test cluster
  # start together, and a second fetch finishing later would replace the directory the first
  # broker is already loading its classes from. Released when the caller's subshell exits.
  if command -v flock >/dev/null 2>&1; then
    exec 8>"$KAFKA_CACHE/.fetch.lock"
    flock -w 600 8 || die "could not lock $KAFKA_CACHE/.fetch.lock"
  fi
  if [[ -f "$dir/.complete" ]]; then
    echo "$dir"
    return 0
  fi
  tmp="$(mktemp -d "$KAFKA_CACHE/.fetch.XXXXXX")"
  log "fetching Kafka jars from Maven Central into $dir ..."
  if ! "$MVN" -q -B -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
    tail -n 40 "$tmp.mvn.log" >&2 || true
    rm -rf "$tmp" "$tmp.mvn.log"
    die "mvn dependency:copy-dependencies failed"
  fi
  rm -f "$tmp.mvn.log"
  ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "no kafka_2.13 jar after fetch"; }
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"   # atomic on the same filesystem: a half-fetched dir is never used
  echo "$dir"
}

# ------------------------------------------------------------- process ----
read_pid() { [[ -f "$PIDFILE" ]] && tr -dc '0-9' <"$PIDFILE" || true; }

# true if $1 is a live kafka.Kafka process (guards against pid reuse)
is_kafka_pid() {
  local pid="$1"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    local cmdline; cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmdline" == *kafka.Kafka* ]] || return 1
  fi
  return 0
}

running_pid() {
  local pid
  pid="$(read_pid)"
  if is_kafka_pid "$pid"; then echo "$pid"; return 0; fi
  return 1
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Speaks the Kafka protocol with the stdlib only (no client library needed):
# ApiVersions v0, then Metadata v1 for all topics; succeeds if the broker
# lists itself.  Returns 2 if python is missing (caller falls back to log line).
protocol_check() {
  command -v "$PYTHON" >/dev/null 2>&1 || return 2
  "$PYTHON" - "$KAFKA_HOST" "$KAFKA_PORT" <<'PY'
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
def call(sock, api_key, version, corr, body=b""):
    cid = b"kafka.sh"
    hdr = struct.pack(">hhih", api_key, version, corr, len(cid)) + cid
    msg = hdr + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    def recv(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed")
            buf += chunk
        return buf
    size = struct.unpack(">i", recv(4))[0]
    data = recv(size)
    if struct.unpack(">i", data[:4])[0] != corr:
        raise ValueError("bad correlation id")
    return data[4:]
try:
    with socket.create_connection((host, port), timeout=5) as s:
        s.settimeout(5)
        r = call(s, 18, 0, 1)                      # ApiVersions v0
        err = struct.unpack(">h", r[:2])[0]
        if err != 0:
            raise ValueError("ApiVersions error %d" % err)
        r = call(s, 3, 1, 2, struct.pack(">i", -1))  # Metadata v1, all topics
        n = struct.unpack(">i", r[:4])[0]
        if n < 1:
            raise ValueError("no brokers in metadata")
        off = 4
        node = struct.unpack(">i", r[off:off + 4])[0]; off += 4
        hl = struct.unpack(">h", r[off:off + 2])[0]; off += 2
        bhost = r[off:off + hl].decode(); off += hl
        bport = struct.unpack(">i", r[off:off + 4])[0]
        print("metadata ok: broker %d at %s:%d" % (node, bhost, bport))
except Exception as e:  # noqa: BLE001
    print("not ready: %s" % e, file=sys.stderr)
    sys.exit(1)
PY
}

fail_start() {
  log "ERROR: $*"
  if [[ -f "$LOGFILE" ]]; then
    log "---- last 60 lines of $LOGFILE ----"
    tail -n 60 "$LOGFILE" >&2 || true
    log "---- end of log ----"
  fi
  exit 1
}

# ------------------------------------------------------------- config -----
write_config() {
  mkdir -p "$LOG_DIRS"
  cat >"$CONFIG" <<EOF
# Generated by scripts/kafka/kafka.sh -- rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@${KAFKA_HOST}:${KAFKA_CONTROLLER_PORT}
listeners=PLAINTEXT://${KAFKA_HOST}:${KAFKA_PORT},CONTROLLER://${KAFKA_HOST}:${KAFKA_CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://${KAFKA_HOST}:${KAFKA_PORT}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=${LOG_DIRS}

# single node: every internal topic has replication factor 1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
default.replication.factor=1
min.insync.replicas=1

auto.create.topics.enable=true
num.partitions=${KAFKA_NUM_PARTITIONS}
delete.topic.enable=true
group.initial.rebalance.delay.ms=0

# keep a small footprint (2-core CI machines)
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.retention.hours=24
EOF

  cp "$SCRIPT_DIR/log4j.properties" "$LOG4J"
}

format_storage() {
  local cp="$1" cid
  if [[ -f "$LOG_DIRS/meta.properties" ]]; then
    return 0
  fi
  if [[ -s "$CLUSTER_ID_FILE" ]]; then
    cid="$(cat "$CLUSTER_ID_FILE")"
  else
    # equivalent of `kafka-storage.sh random-uuid`
    cid="$("$JAVA" -cp "$cp" -Dlog4j.configuration="file:$LOG4J" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    [[ -n "$cid" ]] || die "kafka.tools.StorageTool random-uuid printed nothing"
    echo "$cid" >"$CLUSTER_ID_FILE"
  fi
  log "formatting storage in $LOG_DIRS (cluster id $cid)"
  "$JAVA" -cp "$cp" -Dlog4j.configuration="file:$LOG4J" kafka.tools.StorageTool format \
      -t "$cid" -c "$CONFIG" --ignore-formatted >"$KAFKA_DATA/format.log" 2>&1 \
    || { cat "$KAFKA_DATA/format.log" >&2; die "kafka.tools.StorageTool format failed"; }
}

# ------------------------------------------------------------ commands ----
cmd_start() {
  local pid libs cp deadline started=0 now
  mkdir -p "$KAFKA_DATA"

  # serialise concurrent `start`/`stop` calls on the same data dir
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$KAFKA_DATA/.lock"
    flock -w 300 9 || die "could not lock $KAFKA_DATA/.lock"
  fi

  if pid="$(running_pid)"; then
    log "already running (pid $pid) on ${KAFKA_HOST}:${KAFKA_PORT}"
    return 0
  fi
  rm -f "$PIDFILE"

  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (set JAVA or JAVA_HOME)"
  if port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
    die "port ${KAFKA_HOST}:${KAFKA_PORT} is already in use by another process (not ours: no live pid in $PIDFILE)"
  fi
  if port_open "$KAFKA_HOST" "$KAFKA_CONTROLLER_PORT"; then
    die "controller port ${KAFKA_HOST}:${KAFKA_CONTROLLER_PORT} is already in use by another process"
  fi

  libs="$(fetch_jars)"
  cp="$libs/*"
  write_config
  format_storage "$cp"

  [[ -f "$LOGFILE" ]] && mv -f "$LOGFILE" "$LOGFILE.1"
  log "starting broker on ${KAFKA_HOST}:${KAFKA_PORT} (data $KAFKA_DATA, log $LOGFILE)"
  # setsid: own session, so the broker survives the calling shell and is not
  # hit by the caller's Ctrl-C; $! is the java pid (setsid execs in place).
  # shellcheck disable=SC2086
  setsid nohup "$JAVA" $KAFKA_HEAP_OPTS \
      -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent \
      -Djava.awt.headless=true \
      -Dlog4j.configuration="file:$LOG4J" \
      $KAFKA_JVM_OPTS \
      -cp "$cp" kafka.Kafka "$CONFIG" \
      </dev/null >"$LOGFILE" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"

  deadline=$(( $(date +%s) + KAFKA_START_TIMEOUT ))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      fail_start "broker process $pid exited during startup"
    fi
    if (( ! started )) && grep -q 'Kafka Server started' "$LOGFILE" 2>/dev/null; then
      started=1
    fi
    if (( started )) && port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
      local rc=0 out
      out="$(protocol_check 2>/dev/null)" || rc=$?
      if (( rc == 0 )); then
        log "ready: pid $pid, bootstrap ${KAFKA_HOST}:${KAFKA_PORT} ($out)"
        return 0
      elif (( rc == 2 )); then
        log "ready: pid $pid, bootstrap ${KAFKA_HOST}:${KAFKA_PORT} (no $PYTHON: port + log line only)"
        return 0
      fi
    fi
    now=$(date +%s)
    if (( now >= deadline )); then
      log "timed out after ${KAFKA_START_TIMEOUT}s; stopping pid $pid"
      kill "$pid" 2>/dev/null || true
      sleep 2
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      fail_start "broker did not become ready within ${KAFKA_START_TIMEOUT}s (log line seen: $started)"
    fi
    sleep 0.5
  done
}

cmd_stop() {
  local pid i
  mkdir -p "$KAFKA_DATA"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$KAFKA_DATA/.lock"
    flock -w 300 9 || die "could not lock $KAFKA_DATA/.lock"
  fi
  if ! pid="$(running_pid)"; then
    log "not running"
    rm -f "$PIDFILE"
    return 0
  fi
  log "stopping pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  for (( i = 0; i < KAFKA_STOP_TIMEOUT * 4; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "no clean shutdown within ${KAFKA_STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for (( i = 0; i < 40; i++ )); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
  fi
  kill -0 "$pid" 2>/dev/null && die "pid $pid still alive after SIGKILL"
  rm -f "$PIDFILE"
  log "stopped"
}

cmd_status() {
  local pid out
  if pid="$(running_pid)"; then
    if out="$(protocol_check 2>&1)"; then
      echo "running: pid $pid, ${KAFKA_HOST}:${KAFKA_PORT}, $out"
      return 0
    fi
    echo "running: pid $pid, ${KAFKA_HOST}:${KAFKA_PORT}, but not answering yet ($out)"
    return 1
  fi
  echo "not running"
  return 3
}

cmd_reset() {
  cmd_stop
  # delete only what this script creates, never the whole of an arbitrary dir
  rm -rf "$LOG_DIRS" "$CLUSTER_ID_FILE" "$CONFIG" "$LOG4J" "$LOGFILE" "$LOGFILE.1" \
         "$KAFKA_DATA/format.log" "$PIDFILE"
  log "data removed from $KAFKA_DATA"
}

case "${1:-}" in
  start)   cmd_start ;;
  stop)    cmd_stop ;;
  status)  cmd_status ;;
  restart) cmd_stop; cmd_start ;;
  fetch)   fetch_jars ;;
  reset)   cmd_reset ;;
  *) echo "usage: $0 {start|stop|status|restart|fetch|reset}" >&2; exit 2 ;;
esac
