#!/usr/bin/env bash
# Instructions per HTTP response: the same servers as benches/http.sh (benches/http_server.rs),
# each run under valgrind's callgrind, which counts the instructions the server process executes
# in user space. Unlike requests per second, the count does not move with the machine's load.
#
#   benches/http_ir.sh                         # every variant
#   VARIANTS="bare tollgate-allowed" benches/http_ir.sh
#   HTTP_SERVER=path/to/http_server benches/http_ir.sh   # a server already built
#   KEEP=dir benches/http_ir.sh                # keep each run's callgrind output in dir, for
#                                              # benches/http_parts.py (instructions by part)
#
# Method: per variant, two runs of `wrk -t1 -c4` (SHORT and LONG seconds, 2 and 6 by default)
# against a fresh server under callgrind; the server counts its responses by status and prints
# them on SIGTERM. Instructions per response = (instructions of the long run - of the short
# one) / (responses of the long run - of the short one), which cancels the server's start and
# stop. Kernel work (the TCP stack) is not counted: the figure is the server's own code, axum,
# hyper, tokio and the allocator included.
set -euo pipefail

SHORT=${SHORT:-2}
LONG=${LONG:-6}
PORT=${PORT:-38291}
VARIANTS=${VARIANTS:-"bare bare-429 tollgate-allowed tollgate-denied governor-allowed governor-denied"}
URL="http://127.0.0.1:${PORT}/"

cd "$(dirname "$0")/.."
for tool in valgrind wrk curl; do
    command -v $tool >/dev/null || { echo "$tool not found (apt-get install $tool)" >&2; exit 1; }
done
source benches/http_server_bin.sh

WORK=$(mktemp -d)
SERVER=""
cleanup() {
    if [[ -n "$SERVER" ]]; then kill "$SERVER" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# run <variant> <seconds>: prints "<responses> <instructions>".
run() {
    local variant=$1 seconds=$2
    valgrind --tool=callgrind --callgrind-out-file="$WORK/out" "$BIN" "$variant" "$PORT" \
        >"$WORK/statuses" 2>"$WORK/log" &
    SERVER=$!
    for _ in $(seq 1 300); do
        grep -qs 'on http://' "$WORK/log" && break
        sleep 0.1
    done
    grep -qs 'on http://' "$WORK/log" || { cat "$WORK/log" >&2; echo "no server" >&2; exit 1; }
    curl -s -o /dev/null "$URL"
    wrk -t1 -c4 -d"${seconds}s" "$URL" >/dev/null
    kill -TERM "$SERVER"
    wait "$SERVER" || true
    SERVER=""
    local responses instructions
    responses=$(awk '{ s += $NF } END { print s }' "$WORK/statuses")
    instructions=$(sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$WORK/log")
    [[ -n $responses && -n $instructions ]] || { cat "$WORK/log" >&2; exit 1; }
    if [[ -n ${KEEP:-} ]]; then
        mkdir -p "$KEEP"
        cp "$WORK/out" "$KEEP/$variant-$seconds.out"
        echo "$responses" >"$KEEP/$variant-$seconds.responses"
    fi
    echo "$responses $instructions"
}

printf '%-18s %12s\n' variant "instr/resp"
for variant in $VARIANTS; do
    read -r r1 i1 < <(run "$variant" "$SHORT")
    read -r r2 i2 < <(run "$variant" "$LONG")
    ((r2 > r1)) || { echo "$variant: the long run served no more responses" >&2; exit 1; }
    printf '%-18s %12d\n' "$variant" $(((i2 - i1) / (r2 - r1)))
done
