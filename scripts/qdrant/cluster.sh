#!/usr/bin/env bash
# Run a real three-node Qdrant cluster on this machine (loopback only, the binary beside the
# repository, no container) with TLS and an API key, for integration tests and chaos benchmarks.
#
#   scripts/qdrant/cluster.sh start         # certificates and API key (once), start the 3 nodes, wait until
#                                           #   every /readyz is 200 and every node's GET /cluster shows 3 peers
#                                           #   and a raft leader; writes $QDRANT_CLUSTER_DATA/client.env
#   scripts/qdrant/cluster.sh stop          # SIGTERM every node, wait (SIGKILL after QDRANT_CLUSTER_STOP_TIMEOUT)
#   scripts/qdrant/cluster.sh status        # one line a node; exit 0 if all 3 ready, 1 if some are not, 3 if none runs
#   scripts/qdrant/cluster.sh restart
#   scripts/qdrant/cluster.sh reset         # stop and delete everything this script made (nodes' data, TLS, key)
#   scripts/qdrant/cluster.sh kill N        # SIGKILL node N (1..3), no clean shutdown (chaos)
#   scripts/qdrant/cluster.sh start-node N  # start node N again on its existing data, wait until it is ready
#                                           #   and back in the cluster (3 peers, leader known)
#   scripts/qdrant/cluster.sh pid N         # print node N's pid (exit 1 if it is not running)
#   scripts/qdrant/cluster.sh env           # print the client settings (the same lines as client.env)
#   scripts/qdrant/cluster.sh logs N [L]    # last L lines of node N's log
#
# Environment (all optional):
#   QDRANT_BIN                    server binary (default: ../shared/qdrant/qdrant relative to the repository root)
#   QDRANT_CLUSTER_DATA           everything: nodes' storage, logs, pids, TLS, API key (default /tmp/jevmem-qdrant-cluster)
#   QDRANT_CLUSTER_BASE_PORT      node i listens on HTTP BASE+(i-1)*10, gRPC that +1, p2p that +2 (default 26333:
#                                 26333/26334/26335, 26343/26344/26345, 26353/26354/26355), all on 127.0.0.1
#   QDRANT_CLUSTER_API_KEY        API key; written to $QDRANT_CLUSTER_DATA/api-key on start (default: a random key
#                                 generated once into that file). A changed key needs stop, then start.
#   QDRANT_CLUSTER_P2P_TLS        1 (default): peers talk gRPC over TLS too (https:// peer URIs verified against the
#                                 CA; the p2p port asks for a client certificate from it, hence clientAuth below);
#                                 0: plaintext p2p on loopback. Peer URIs live in the raft state: change only after reset.
#   QDRANT_CLUSTER_START_TIMEOUT  seconds to wait for the cluster or a node (default 90)
#   QDRANT_CLUSTER_STOP_TIMEOUT   seconds to wait for a clean shutdown before SIGKILL (default 20)
#
# TLS ($QDRANT_CLUSTER_DATA/tls, made once with openssl): ca.pem/ca.key (self-signed CA), cert.pem/key.pem (server
# certificate signed by it, SAN IP:127.0.0.1 and DNS:localhost, serverAuth+clientAuth), other-ca.pem (an unrelated
# CA, for "unknown CA" tests). REST and gRPC of every node are https only; /readyz, /healthz, /livez need no key.
# Clients: eval "$(scripts/qdrant/cluster.sh env)" sets JEVMEM_QDRANT_URL (the 3 https URLs, comma-separated),
# JEVMEM_QDRANT_API_KEY_FILE and JEVMEM_QDRANT_CA_FILE.
#
# Data survives stop/start and a SIGKILL. The first start founds the cluster on node 1 alone, then nodes 2 and 3
# join it (--bootstrap); later starts launch all three at once (a lone peer of a 3-peer cluster has no quorum).
# No pipe here feeds a reader that exits early (grep -q, head, awk exit): under pipefail the writer's SIGPIPE
# would fail the script (exit 141). The API key never appears on a command line (curl reads it from a file).
set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
QDRANT_BIN="${QDRANT_BIN:-$REPO/../shared/qdrant/qdrant}"
DATA="${QDRANT_CLUSTER_DATA:-/tmp/jevmem-qdrant-cluster}"
BASE_PORT="${QDRANT_CLUSTER_BASE_PORT:-26333}"
P2P_TLS="${QDRANT_CLUSTER_P2P_TLS:-1}"
START_TIMEOUT="${QDRANT_CLUSTER_START_TIMEOUT:-90}"
STOP_TIMEOUT="${QDRANT_CLUSTER_STOP_TIMEOUT:-20}"
HOST=127.0.0.1
NODES=(1 2 3)
TLS="$DATA/tls"
CA="$TLS/ca.pem"
KEY_FILE="$DATA/api-key"
HEADER_FILE="$DATA/api-key.header"
CLIENT_ENV="$DATA/client.env"

log() { echo "cluster.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

http_port() { echo $((BASE_PORT + ($1 - 1) * 10)); }
grpc_port() { echo $((BASE_PORT + ($1 - 1) * 10 + 1)); }
p2p_port() { echo $((BASE_PORT + ($1 - 1) * 10 + 2)); }
url() { echo "https://$HOST:$(http_port "$1")"; }
p2p_uri() { if [[ "$P2P_TLS" == 1 ]]; then echo "https://$HOST:$(p2p_port "$1")"; else echo "http://$HOST:$(p2p_port "$1")"; fi; }
node_dir() { echo "$DATA/node$1"; }
pid_file() { echo "$DATA/node$1/qdrant.pid"; }
log_file() { echo "$DATA/node$1/qdrant.log"; }

check_node() { [[ "${1:-}" =~ ^[123]$ ]] || die "node must be 1, 2 or 3 (got '${1:-}')"; }

read_pid() { local f; f="$(pid_file "$1")"; if [[ -f "$f" ]]; then tr -dc '0-9' <"$f"; fi; }

# true if pid $1 is alive; a zombie counts as dead (the nodes are reparented to init, which may reap them late)
alive() {
    local st
    [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
    [[ -r "/proc/$1/stat" ]] || return 0
    st="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    st="${st##*) }"
    [[ "${st%% *}" != Z ]]
}

# true if $1 is a live process of our binary (guards against a reused pid)
is_qdrant_pid() {
    local pid="$1" exe
    alive "$pid" || return 1
    if [[ -e "/proc/$pid/exe" ]]; then
        exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
        [[ "$(basename "$exe")" == "$(basename "$QDRANT_BIN")" ]] || return 1
    fi
    return 0
}

running_pid() {
    local pid; pid="$(read_pid "$1")"
    if is_qdrant_pid "$pid"; then echo "$pid"; return 0; fi
    return 1
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
ready() { curl -fsS -m 2 --cacert "$CA" -o /dev/null "$(url "$1")/readyz" 2>/dev/null; }
# GET with the API key (read from a file, never on the command line); prints the body
api_get() { curl -fsS -m 3 --cacert "$CA" -H "@$HEADER_FILE" "$(url "$1")$2" 2>/dev/null; }

# true if node $1 sees ${2:-3} peers and is a raft leader or a follower that knows its leader (count "uri" keys:
# grep -o reads all its input)
in_cluster() {
    local body peers
    body="$(api_get "$1" /cluster)" || return 1
    peers="$(grep -o '"uri":' <<<"$body" | wc -l)" || return 1
    [[ "$peers" -eq "${2:-3}" ]] || return 1
    # raft leader id 0 = none known (a node alone, or before it heard from the leader)
    [[ "$body" =~ \"leader\":[1-9][0-9]* && "$body" =~ \"role\":\"(Leader|Follower)\" ]]
}

lock() {
    mkdir -p "$DATA"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$DATA/.lock"
        flock -w 180 9 || die "could not lock $DATA/.lock"
    fi
}

make_ca() { # $1: file stem, $2: common name
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -keyout "$1.key" -out "$1.pem" \
        -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" >/dev/null 2>&1 || die "openssl: could not make $1.pem"
}

ensure_tls() {
    [[ -s "$TLS/cert.pem" && -s "$TLS/key.pem" && -s "$CA" && -s "$TLS/other-ca.pem" ]] && return 0
    command -v openssl >/dev/null 2>&1 || die "openssl not found (needed to make the test certificates)"
    log "making test certificates in $TLS"
    rm -rf "$TLS.tmp" && mkdir -p "$TLS.tmp" && chmod 700 "$TLS.tmp"
    make_ca "$TLS.tmp/ca" "jevmem test CA"
    make_ca "$TLS.tmp/other-ca" "jevmem unrelated test CA"
    cat >"$TLS.tmp/server.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
EOF
    openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$TLS.tmp/key.pem" -out "$TLS.tmp/server.csr" \
        -subj "/CN=localhost" >/dev/null 2>&1 || die "openssl: could not make the server key"
    openssl x509 -req -sha256 -days 825 -in "$TLS.tmp/server.csr" -CA "$TLS.tmp/ca.pem" -CAkey "$TLS.tmp/ca.key" \
        -CAcreateserial -extfile "$TLS.tmp/server.ext" -out "$TLS.tmp/cert.pem" >/dev/null 2>&1 \
        || die "openssl: could not sign the server certificate"
    rm -f "$TLS.tmp/server.csr" "$TLS.tmp/server.ext" "$TLS.tmp/ca.srl"
    chmod 644 "$TLS.tmp"/*.pem && chmod 600 "$TLS.tmp"/*.key "$TLS.tmp/key.pem"
    rm -rf "$TLS" && mv "$TLS.tmp" "$TLS"
}

ensure_key() {
    local key="${QDRANT_CLUSTER_API_KEY:-}"
    if [[ -z "$key" && -s "$KEY_FILE" ]]; then key="$(tr -d '\r\n' <"$KEY_FILE")"; fi
    if [[ -z "$key" ]]; then key="$(openssl rand -hex 24)" || die "openssl rand failed"; fi
    [[ "$key" =~ ^[[:graph:]]+$ ]] || die "QDRANT_CLUSTER_API_KEY must be printable ASCII without spaces"
    (umask 077 && printf '%s\n' "$key" >"$KEY_FILE.tmp" && printf 'api-key: %s\n' "$key" >"$HEADER_FILE.tmp")
    mv -f "$KEY_FILE.tmp" "$KEY_FILE" && mv -f "$HEADER_FILE.tmp" "$HEADER_FILE"
}

# a value as a shell word: bare when it is plain (URLs, paths, commas), else quoted by printf %q
shq() { if [[ "$1" =~ ^[A-Za-z0-9_./:,@%+=-]+$ ]]; then printf '%s' "$1"; else printf '%q' "$1"; fi; }

client_env() {
    local urls="" i
    for i in "${NODES[@]}"; do urls="${urls:+$urls,}$(url "$i")"; done
    echo "# Qdrant test cluster ($DATA): REST at these URLs, gRPC at each port + 1"
    echo "export JEVMEM_QDRANT_URL=$(shq "$urls")"
    echo "export JEVMEM_QDRANT_API_KEY_FILE=$(shq "$KEY_FILE")"
    echo "export JEVMEM_QDRANT_CA_FILE=$(shq "$CA")"
}

# launch node $1 in the background (no waiting); $2=1: bootstrap from node 1 (first start of nodes 2, 3)
launch() {
    local i="$1" bootstrap="$2" dir pid args=()
    dir="$(node_dir "$i")"
    port_open "$(http_port "$i")" && die "port $HOST:$(http_port "$i") (node $i HTTP) is in use by another process"
    port_open "$(grpc_port "$i")" && die "port $HOST:$(grpc_port "$i") (node $i gRPC) is in use by another process"
    port_open "$(p2p_port "$i")" && die "port $HOST:$(p2p_port "$i") (node $i p2p) is in use by another process"
    mkdir -p "$dir/storage" "$dir/snapshots"
    [[ -f "$(log_file "$i")" ]] && mv -f "$(log_file "$i")" "$(log_file "$i").1"
    args=(--uri "$(p2p_uri "$i")")
    [[ "$bootstrap" == 1 ]] && args+=(--bootstrap "$(p2p_uri 1)")
    # setsid: the node survives the calling shell and its Ctrl-C; cd: Qdrant resolves relative paths (its
    # ./config, ./static) against its working directory; env -u: QDRANT_URI/QDRANT_BOOTSTRAP are CLI flags too.
    (cd "$dir" && exec env -u QDRANT_URI -u QDRANT_BOOTSTRAP \
        QDRANT__SERVICE__HOST="$HOST" QDRANT__SERVICE__HTTP_PORT="$(http_port "$i")" \
        QDRANT__SERVICE__GRPC_PORT="$(grpc_port "$i")" QDRANT__SERVICE__API_KEY="$(tr -d '\r\n' <"$KEY_FILE")" \
        QDRANT__SERVICE__ENABLE_TLS=true QDRANT__TLS__CERT="$TLS/cert.pem" QDRANT__TLS__KEY="$TLS/key.pem" \
        QDRANT__TLS__CA_CERT="$CA" QDRANT__CLUSTER__ENABLED=true QDRANT__CLUSTER__P2P__PORT="$(p2p_port "$i")" \
        QDRANT__CLUSTER__P2P__ENABLE_TLS="$([[ "$P2P_TLS" == 1 ]] && echo true || echo false)" \
        QDRANT__STORAGE__STORAGE_PATH="$dir/storage" QDRANT__STORAGE__SNAPSHOTS_PATH="$dir/snapshots" \
        QDRANT__TELEMETRY_DISABLED=true setsid "$QDRANT_BIN" "${args[@]}" </dev/null >"$(log_file "$i")" 2>&1 9>&-) &
    pid=$!
    echo "$pid" >"$(pid_file "$i")"
}

# the last $2 lines of node $1's log without the access log (the wait loops' own requests)
log_tail() { grep -v 'actix_web::middleware::logger' "$(log_file "$1")" | tail -n "$2" >&2 || true; }

# wait until every node in "${@:2}" is ready and sees $1 peers and a leader; on failure print log tails, return 1
wait_nodes() {
    local t0=$SECONDS i pending peers="$1"
    shift
    while (( SECONDS - t0 < START_TIMEOUT )); do
        pending=()
        for i in "$@"; do
            # alive, not running_pid: just after launch the process may still be exec'ing env/setsid
            if ! alive "$(read_pid "$i")"; then
                log "node $i exited after $((SECONDS - t0))s. Log tail ($(log_file "$i")):"
                log_tail "$i" 40
                rm -f "$(pid_file "$i")"
                return 1
            fi
            if ready "$i" && in_cluster "$i" "$peers"; then :; else pending+=("$i"); fi
        done
        (( ${#pending[@]} == 0 )) && return 0
        sleep 0.3
    done
    for i in "${pending[@]}"; do
        log "node $i not ready and seeing $peers peers and a leader within ${START_TIMEOUT}s. Log tail ($(log_file "$i")):"
        log_tail "$i" 30
    done
    return 1
}

# true if node $1 has joined (or, node 1, founded) the cluster before: its raft state is on disk
has_state() { [[ -s "$(node_dir "$1")/storage/raft_state.json" ]]; }
# node $1's bootstrap flag for launch: only a node 2 or 3 without raft state bootstraps from node 1
needs_bootstrap() { if [[ "$1" != 1 ]] && ! has_state "$1"; then echo 1; else echo 0; fi; }

cmd_start() {
    local t0=$SECONDS i need=() started=()
    lock
    [[ -x "$QDRANT_BIN" ]] || die "Qdrant binary not found or not executable: $QDRANT_BIN (set QDRANT_BIN)"
    command -v curl >/dev/null 2>&1 || die "curl not found (needed to wait for /readyz)"
    ensure_tls
    ensure_key
    # nodes already running are left alone (one that is not ready yet may be catching up with the raft log)
    for i in "${NODES[@]}"; do
        if ! running_pid "$i" >/dev/null; then rm -f "$(pid_file "$i")"; need+=("$i"); fi
    done
    if ! has_state 1; then
        # a new cluster: node 1 founds it alone, then the others join it
        [[ "${need[*]}" == "1 2 3" ]] || die "node 1 has no raft state but other nodes are running: run reset"
        launch 1 0
        started=(1)
        wait_nodes 1 1 || { stop_nodes 1; exit 1; }
        need=(2 3)
    fi
    for i in "${need[@]}"; do launch "$i" "$(needs_bootstrap "$i")"; started+=("$i"); done
    wait_nodes 3 "${NODES[@]}" || { stop_nodes "${started[@]}"; exit 1; }
    client_env >"$CLIENT_ENV.tmp" && mv -f "$CLIENT_ENV.tmp" "$CLIENT_ENV"
    log "cluster ready in $((SECONDS - t0))s: $(url 1) $(url 2) $(url 3) (p2p $([[ "$P2P_TLS" == 1 ]] && echo TLS || echo plaintext); data $DATA; client settings $CLIENT_ENV)"
}

cmd_start_node() {
    local i="$1" t0=$SECONDS pid
    check_node "$i"
    lock
    has_state 1 || die "no cluster data in $DATA: run start first"
    [[ -s "$KEY_FILE" && -s "$CA" ]] || die "no API key or CA in $DATA: run start first"
    if pid="$(running_pid "$i")"; then
        log "node $i already running (pid $pid)"
    else
        rm -f "$(pid_file "$i")"
        launch "$i" "$(needs_bootstrap "$i")"
    fi
    wait_nodes 3 "$i" || { stop_nodes "$i"; exit 1; }
    log "node $i ready and in the cluster (pid $(read_pid "$i")) in $((SECONDS - t0))s at $(url "$i")"
}

# SIGTERM the given nodes together, wait, SIGKILL the ones that hang
stop_nodes() {
    local i pid pids=() k n
    for i in "$@"; do
        if pid="$(running_pid "$i")"; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$i:$pid")
        else rm -f "$(pid_file "$i")"; fi
    done
    for k in "${pids[@]}"; do
        i="${k%%:*}" pid="${k#*:}"
        for (( n = 0; n < STOP_TIMEOUT * 4; n++ )); do alive "$pid" || break; sleep 0.25; done
        if alive "$pid"; then
            log "node $i (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for (( n = 0; n < 40; n++ )); do alive "$pid" || break; sleep 0.25; done
        fi
        alive "$pid" && die "node $i (pid $pid) still alive after SIGKILL"
        rm -f "$(pid_file "$i")"
        log "stopped node $i (pid $pid)"
    done
}

cmd_kill() {
    local i="$1" pid n
    check_node "$i"
    lock
    pid="$(running_pid "$i")" || die "node $i is not running"
    kill -KILL "$pid"
    for (( n = 0; n < 40; n++ )); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && die "node $i (pid $pid) still alive after SIGKILL"
    rm -f "$(pid_file "$i")"
    log "killed node $i (pid $pid, SIGKILL)"
}

cmd_status() {
    local i pid up=0 ok=0 line
    for i in "${NODES[@]}"; do
        line="node $i $(url "$i"):"
        if pid="$(running_pid "$i")"; then
            up=$((up + 1))
            if ready "$i" && in_cluster "$i"; then ok=$((ok + 1)); line+=" running pid $pid, ready, in cluster (3 peers, leader known)"
            elif ready "$i"; then line+=" running pid $pid, ready, but does not see 3 peers and a leader"
            else line+=" running pid $pid, /readyz not 200"; fi
        else
            line+=" not running"
        fi
        echo "$line"
    done
    (( ok == ${#NODES[@]} )) && return 0
    (( up > 0 )) && return 1
    return 3
}

cmd_reset() {
    local i
    lock
    stop_nodes "${NODES[@]}"
    # delete only what this script creates, never the whole of an arbitrary directory
    for i in "${NODES[@]}"; do rm -rf "$(node_dir "$i")"; done
    rm -rf "$TLS" "$TLS.tmp" "$KEY_FILE" "$KEY_FILE.tmp" "$HEADER_FILE" "$HEADER_FILE.tmp" "$CLIENT_ENV" "$CLIENT_ENV.tmp"
    log "cluster data, certificates and API key removed from $DATA"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) lock; stop_nodes "${NODES[@]}" ;;
    status) cmd_status ;;
    restart) (lock; stop_nodes "${NODES[@]}"); cmd_start ;;
    reset) cmd_reset ;;
    kill) cmd_kill "${2:-}" ;;
    start-node) cmd_start_node "${2:-}" ;;
    pid) check_node "${2:-}"; running_pid "$2" || { log "node $2 is not running"; exit 1; } ;;
    env) client_env ;;
    logs) check_node "${2:-}"; tail -n "${3:-100}" "$(log_file "$2")" ;;
    *) echo "usage: $0 start|stop|status|restart|reset|kill N|start-node N|pid N|env|logs N [L]" >&2; exit 2 ;;
esac
