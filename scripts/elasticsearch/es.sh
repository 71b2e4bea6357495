#!/usr/bin/env bash
# Run a real single-node Elasticsearch (server jar + Netty4 from Maven Central) for integration tests.
#
#   scripts/elasticsearch/es.sh start|stop|status|restart|logs
#   scripts/elasticsearch/es.sh scan DIR NEEDLE...   (Lucene's view: deleted documents included)
#
# Environment:
#   ES_PORT        HTTP port (default 9200); transport port is ES_TRANSPORT_PORT (default ES_PORT+100)
#   ES_CACHE       jars, compiled launcher (default $HOME/.cache/jevmem-es)
#   ES_HOME_DIR    node home: data, logs, pid file (default $ES_CACHE/node-$ES_PORT)
#   ES_HEAP        JVM heap (default 1g)
#   ES_JAVA        java >= 21 (default: $JAVA_HOME if >= 21, else a Temurin/OpenJDK >= 21 under /usr/lib/jvm or /opt)
#   ES_START_TIMEOUT  seconds to wait for GET / (default 120)
#   ES_FRESH=1     wipe the node's data directory on start
#   ES_LOG_LEVEL   root log level written to $ES_HOME_DIR/es.out (default INFO)
#
# What is there: the full server (index/bulk/search/BM25/standard, simple, whitespace, stop, keyword
# analyzers, lowercase/stop filters, aggs, knn/dense_vector, highlight, scroll, PIT) over real HTTP,
# plus GET / from RootInfoPlugin. What is not: the distribution's modules that are not on Maven Central
# (analysis-common: english/stemmer/synonym/asciifolding..., reindex: _update_by_query/_delete_by_query/
# _reindex, lang-painless: scripts, mapper-extras, x-pack). Needs Java >= 21 and about 1.3 GB RAM.
set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ES_PORT="${ES_PORT:-9200}"
ES_TRANSPORT_PORT="${ES_TRANSPORT_PORT:-$((ES_PORT + 100))}"
ES_CACHE="${ES_CACHE:-${HOME:-/tmp}/.cache/jevmem-es}"
ES_HOME_DIR="${ES_HOME_DIR:-$ES_CACHE/node-$ES_PORT}"
ES_HEAP="${ES_HEAP:-1g}"
ES_START_TIMEOUT="${ES_START_TIMEOUT:-120}"
PID_FILE="$ES_HOME_DIR/es.pid"
LOG_FILE="$ES_HOME_DIR/es.out"
URL="http://127.0.0.1:$ES_PORT/"

log() { echo "es.sh: $*" >&2; }

java_major() { # prints the feature version of the given java binary, or 0
    local v
    v="$("$1" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ && !v {v = $2} END {print v}' | cut -d. -f1)" || true
    [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}

find_java() {
    if [[ -n "${ES_JAVA:-}" ]]; then echo "$ES_JAVA"; return; fi
    local c
    for c in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} /usr/lib/jvm/*/bin/java /opt/*/bin/java /opt/*/*/bin/java "$(command -v java || true)"; do
        [[ -x "$c" ]] || continue
        if (( $(java_major "$c") >= 21 )); then echo "$c"; return; fi
    done
    log "no Java >= 21 found (Elasticsearch 9 needs it); set ES_JAVA"; exit 1
}

# Fingerprints: jars are re-resolved when pom.xml changes, the launcher recompiled when pom or sources change.
pom_stamp() { sha256sum <"$HERE/pom.xml" | cut -c1-16; }
src_stamp() { cat "$HERE/pom.xml" $(find "$HERE/src" -name '*.java' | sort) | sha256sum | cut -c1-16; }

ensure_built() {
    local java="$1" stamp; stamp="$(pom_stamp)"
    local libdir="$ES_CACHE/lib" classes="$ES_CACHE/classes-$(src_stamp)"
    if [[ ! -f "$ES_CACHE/lib.$stamp.ok" ]]; then
        log "resolving jars into $libdir (mvn, Maven Central)"
        rm -rf "$libdir" && mkdir -p "$libdir"
        mkdir -p "$ES_CACHE"
        mvn -B -Dstyle.color=never -f "$HERE/pom.xml" dependency:copy-dependencies \
            -DoutputDirectory="$libdir" -DincludeScope=runtime >"$ES_CACHE/mvn.log" 2>&1 \
            || { log "mvn failed; tail of $ES_CACHE/mvn.log:"; tail -n 30 "$ES_CACHE/mvn.log" >&2; exit 1; }
        rm -f "$ES_CACHE"/lib.*.ok && touch "$ES_CACHE/lib.$stamp.ok"
    fi
    if [[ ! -d "$classes" ]]; then
        log "compiling launcher into $classes"
        local javac; javac="$(dirname "$java")/javac"
        rm -rf "$ES_CACHE"/classes-* && mkdir -p "$classes.tmp"
        "$javac" -nowarn -d "$classes.tmp" -cp "$libdir/*" $(find "$HERE/src" -name '*.java') >&2 \
            || { log "javac failed"; exit 1; }
        mv "$classes.tmp" "$classes"
    fi
    echo "$classes:$libdir/*"
}

# ES loads libzstd.so (needed by index.codec=best_compression and logsdb indices) from
# es.nativelibs.path; the distribution ships it, Maven Central does not, so link the system one
# (Debian: libzstd1). The native vector library (libvec) is not available either: disable it
# (Lucene's Panama vector code is used instead).
native_opts() {
    local dir="$ES_CACHE/native" lib c
    # awk reads to the end (no early exit): an early exit would SIGPIPE ldconfig, and with pipefail
    # that fails the whole script (exit 141) whenever ldconfig's output outgrows the pipe buffer.
    lib="$(ldconfig -p 2>/dev/null | awk '/libzstd\.so\.1 .*x86-64|libzstd\.so\.1 .*AArch64/ && !f {f = $NF} END {print f}')" || lib=""
    if [[ -z "$lib" ]]; then
        for c in /usr/lib/x86_64-linux-gnu/libzstd.so.1 /usr/lib/aarch64-linux-gnu/libzstd.so.1 /usr/lib64/libzstd.so.1; do
            if [[ -e "$c" ]]; then lib="$c"; break; fi
        done
    fi
    echo "-Dorg.elasticsearch.nativeaccess.enableVectorLibrary=false"
    if [[ -n "$lib" ]]; then
        mkdir -p "$dir" && ln -sfn "$lib" "$dir/libzstd.so"
        echo "-Des.nativelibs.path=$dir"
    else
        log "warning: libzstd.so.1 not found (apt-get install libzstd1); native access disabled, best_compression indices will fail"
    fi
}

is_running() { [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }
answers() { curl -fsS -m 2 -o /dev/null "$URL" 2>/dev/null; }

cmd_start() {
    if is_running; then
        if answers; then log "already running (pid $(cat "$PID_FILE")) at $URL"; return 0; fi
        log "pid $(cat "$PID_FILE") alive but $URL not answering; restarting"; cmd_stop
    fi
    if answers; then log "something else already answers at $URL"; exit 1; fi
    local java cp; java="$(find_java)" || exit 1; cp="$(ensure_built "$java")" || exit 1
    [[ "${ES_FRESH:-0}" == 1 ]] && rm -rf "$ES_HOME_DIR/data"
    mkdir -p "$ES_HOME_DIR/tmp"
    local t0=$SECONDS nopts; nopts="$(native_opts)"
    # setsid: the node survives the calling shell; -XX:+UseSerialGC: 2-core machines.
    setsid "$java" -Xms"$ES_HEAP" -Xmx"$ES_HEAP" -XX:+UseSerialGC \
        --enable-native-access=ALL-UNNAMED --add-modules jdk.incubator.vector -Dfile.encoding=UTF-8 \
        -Des.log.level="${ES_LOG_LEVEL:-INFO}" $nopts \
        -Dlog4j2.disable.jmx=true -Djava.io.tmpdir="$ES_HOME_DIR/tmp" \
        -cp "$cp" jevmem.es.EsNode "$ES_HOME_DIR" "$ES_PORT" "$ES_TRANSPORT_PORT" \
        >"$LOG_FILE" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    while (( SECONDS - t0 < ES_START_TIMEOUT )); do
        if answers; then log "started (pid $(cat "$PID_FILE")) at $URL in $((SECONDS - t0))s"; return 0; fi
        if ! is_running; then break; fi
        sleep 1
    done
    if is_running; then log "Elasticsearch did not answer at $URL within ${ES_START_TIMEOUT}s; log tail ($LOG_FILE):"
    else log "Elasticsearch exited during startup after $((SECONDS - t0))s; log tail ($LOG_FILE):"; fi
    tail -n 60 "$LOG_FILE" >&2 || true
    cmd_stop || true
    exit 1
}

cmd_stop() {
    if ! is_running; then log "not running"; rm -f "$PID_FILE"; return 0; fi
    local pid; pid="$(cat "$PID_FILE")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then log "pid $pid ignored SIGTERM; killing"; kill -9 "$pid" 2>/dev/null || true; fi
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    if is_running && answers; then
        log "running (pid $(cat "$PID_FILE")) at $URL"; curl -fsS -m 2 "$URL"; echo; return 0
    elif is_running; then log "pid $(cat "$PID_FILE") alive but $URL not answering"; return 1
    else log "not running"; return 3; fi
}

# Lucene's own view of index folders (jevmem.es.SegmentScan): every document of every segment,
# deleted ones included, counted per needle found in its stored fields.
cmd_scan() {
    local java cp; java="$(find_java)" || exit 1; cp="$(ensure_built "$java")" || exit 1
    "$java" --enable-native-access=ALL-UNNAMED --add-modules jdk.incubator.vector -Dlog4j2.disable.jmx=true \
        $(native_opts) -cp "$cp" jevmem.es.SegmentScan "$@" 2> >(grep -v "WARNING: Using incubator modules" >&2)
}

case "${1:-}" in
    start) cmd_start ;;
    scan) shift; cmd_scan "$@" ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    logs) tail -n "${2:-100}" "$LOG_FILE" ;;
    *) echo "usage: $0 start|stop|restart|status|logs [N]|scan DIR NEEDLE..." >&2; exit 2 ;;
esac
