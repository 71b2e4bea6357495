#!/usr/bin/env bash
# Run a real single-node Qdrant server (the binary beside the repository, no container) for
# integration tests and benchmarks.
#
#   scripts/qdrant/qdrant.sh start     # start, wait until GET /readyz answers 200
#   scripts/qdrant/qdrant.sh stop      # SIGTERM via the pid file, wait (SIGKILL after QDRANT_STOP_TIMEOUT)
#   scripts/qdrant/qdrant.sh status    # exit 0 if running and ready, 1 if running but not ready, 3 if not running
#   scripts/qdrant/qdrant.sh restart
#   scripts/qdrant/qdrant.sh reset     # stop and delete the data (collections, WAL, snapshots)
#   scripts/qdrant/qdrant.sh logs [N]  # last N lines of the server log
#
# Environment (all optional):
#   QDRANT_BIN            server binary (default: ../shared/qdrant/qdrant relative to the repository root)
#   QDRANT_HOST           listen address (default 127.0.0.1; never every interface by default)
#   QDRANT_PORT           HTTP (REST) port (default 6333)
#   QDRANT_GRPC_PORT      gRPC port (default QDRANT_PORT+1)
#   QDRANT_DATA           storage, snapshots, log and pid file (default /tmp/jevmem-qdrant-$QDRANT_PORT)
#   QDRANT_START_TIMEOUT  seconds to wait for /readyz (default 60)
#   QDRANT_STOP_TIMEOUT   seconds to wait for a clean shutdown before SIGKILL (default 20)
#   QDRANT_FRESH=1        delete the data on start
#
# Data survives stop/start (and a SIGKILL: the server replays its write-ahead log on start).
# Clients: http://${QDRANT_HOST}:${QDRANT_PORT} (JEVMEM_QDRANT_URL).
#
# No pipe here feeds a reader that exits early (grep -q, head, awk exit): under pipefail the
# writer's SIGPIPE would fail the script (exit 141).
set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
QDRANT_BIN="${QDRANT_BIN:-$REPO/../shared/qdrant/qdrant}"
QDRANT_HOST="${QDRANT_HOST:-127.0.0.1}"
QDRANT_PORT="${QDRANT_PORT:-6333}"
QDRANT_GRPC_PORT="${QDRANT_GRPC_PORT:-$((QDRANT_PORT + 1))}"
QDRANT_DATA="${QDRANT_DATA:-/tmp/jevmem-qdrant-$QDRANT_PORT}"
QDRANT_START_TIMEOUT="${QDRANT_START_TIMEOUT:-60}"
QDRANT_STOP_TIMEOUT="${QDRANT_STOP_TIMEOUT:-20}"
PID_FILE="$QDRANT_DATA/qdrant.pid"
LOG_FILE="$QDRANT_DATA/qdrant.log"
STORAGE="$QDRANT_DATA/storage"
SNAPSHOTS="$QDRANT_DATA/snapshots"
URL="http://$QDRANT_HOST:$QDRANT_PORT"

log() { echo "qdrant.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

read_pid() { if [[ -f "$PID_FILE" ]]; then tr -dc '0-9' <"$PID_FILE"; fi; }

# true if $1 is a live process of our binary (guards against a reused pid)
is_qdrant_pid() {
    local pid="$1" exe
    [[ -n "$pid" ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -e "/proc/$pid/exe" ]]; then
        exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
        [[ "$(basename "$exe")" == "$(basename "$QDRANT_BIN")" ]] || return 1
    fi
    return 0
}

running_pid() {
    local pid; pid="$(read_pid)"
    if is_qdrant_pid "$pid"; then echo "$pid"; return 0; fi
    return 1
}

ready() { curl -fsS -m 2 -o /dev/null "$URL/readyz" 2>/dev/null; }
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

lock() {
    mkdir -p "$QDRANT_DATA"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$QDRANT_DATA/.lock"
        flock -w 120 9 || die "could not lock $QDRANT_DATA/.lock"
    fi
}

cmd_start() {
    local pid t0
    lock
    if pid="$(running_pid)"; then
        if ready; then log "already running (pid $pid) at $URL"; return 0; fi
        log "pid $pid alive but $URL/readyz not answering 200; restarting"
        stop_locked
    fi
    rm -f "$PID_FILE"
    [[ -x "$QDRANT_BIN" ]] || die "Qdrant binary not found or not executable: $QDRANT_BIN (set QDRANT_BIN)"
    command -v curl >/dev/null 2>&1 || die "curl not found (needed to wait for $URL/readyz)"
    port_open "$QDRANT_HOST" "$QDRANT_PORT" && die "port $QDRANT_HOST:$QDRANT_PORT is in use by another process (not ours: no live pid in $PID_FILE)"
    port_open "$QDRANT_HOST" "$QDRANT_GRPC_PORT" && die "gRPC port $QDRANT_HOST:$QDRANT_GRPC_PORT is in use by another process"
    [[ "${QDRANT_FRESH:-0}" == 1 ]] && rm -rf "$STORAGE" "$SNAPSHOTS"
    mkdir -p "$STORAGE" "$SNAPSHOTS"
    [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.1"
    t0=$SECONDS
    # setsid: the server survives the calling shell and its Ctrl-C; cd: Qdrant resolves relative
    # paths (its ./config, ./static) against its working directory, so keep it in the data dir.
    (cd "$QDRANT_DATA" && exec env QDRANT__SERVICE__HOST="$QDRANT_HOST" QDRANT__SERVICE__HTTP_PORT="$QDRANT_PORT" \
        QDRANT__SERVICE__GRPC_PORT="$QDRANT_GRPC_PORT" QDRANT__STORAGE__STORAGE_PATH="$STORAGE" \
        QDRANT__STORAGE__SNAPSHOTS_PATH="$SNAPSHOTS" QDRANT__TELEMETRY_DISABLED=true \
        setsid "$QDRANT_BIN" </dev/null >"$LOG_FILE" 2>&1 9>&-) &
    pid=$!
    echo "$pid" >"$PID_FILE"
    while (( SECONDS - t0 < QDRANT_START_TIMEOUT )); do
        if ready; then log "ready (pid $pid) at $URL in $((SECONDS - t0))s (data $QDRANT_DATA)"; return 0; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.3
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "Qdrant did not answer $URL/readyz within ${QDRANT_START_TIMEOUT}s; stopping it. Log tail ($LOG_FILE):"
        tail -n 40 "$LOG_FILE" >&2 || true
        stop_locked || true
    else
        log "Qdrant exited during startup after $((SECONDS - t0))s. Log tail ($LOG_FILE):"
        tail -n 40 "$LOG_FILE" >&2 || true
        rm -f "$PID_FILE"
    fi
    exit 1
}

stop_locked() {
    local pid i
    if ! pid="$(running_pid)"; then log "not running"; rm -f "$PID_FILE"; return 0; fi
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < QDRANT_STOP_TIMEOUT * 4; i++ )); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored SIGTERM for ${QDRANT_STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for (( i = 0; i < 40; i++ )); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
    kill -0 "$pid" 2>/dev/null && die "pid $pid still alive after SIGKILL"
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_stop() { lock; stop_locked; }

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        if ready; then echo "running: pid $pid at $URL, $(curl -fsS -m 2 "$URL/" 2>/dev/null || true)"; return 0; fi
        echo "running: pid $pid at $URL, but /readyz does not answer 200 yet"; return 1
    fi
    echo "not running"
    return 3
}

cmd_reset() {
    lock
    stop_locked
    # delete only what this script creates, never the whole of an arbitrary directory
    rm -rf "$STORAGE" "$SNAPSHOTS" "$LOG_FILE" "$LOG_FILE.1" "$PID_FILE"
    log "data removed from $QDRANT_DATA"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    restart) cmd_stop; cmd_start ;;
    reset) cmd_reset ;;
    logs) tail -n "${2:-100}" "$LOG_FILE" ;;
    *) echo "usage: $0 start|stop|status|restart|reset|logs [N]" >&2; exit 2 ;;
esac
