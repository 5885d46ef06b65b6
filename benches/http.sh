#!/usr/bin/env bash
# HTTP load benchmark: the same axum hello-world bare, behind tollgate and behind tower_governor,
# loaded with wrk over loopback; allowed path (nothing is ever denied) and denied path (every
# request after the first is denied). Server: benches/http_server.rs.
#
#   benches/http.sh                       # 5 rounds of every variant, 6 s each (about 4 minutes)
#   ROUNDS=3 DURATION=10 benches/http.sh  # other settings: CONNECTIONS, WARMUP, PORT, VARIANTS
#   HTTP_SERVER=path/to/http_server benches/http.sh   # a server already built (say, of another
#                                                     # commit) instead of building this one
#
# Variants (see benches/http_server.rs): bare; bare-429, the handler itself answering with
# tollgate's denial (same status, headers and body), which shows what a response of that size
# costs without any limiter; tollgate-allowed, tollgate-allowed-no-headers (no rate limit
# headers, only with VARIANTS), tollgate-denied; governor-allowed,
# governor-denied.
#
# Method:
# - The server runs on one thread pinned to CPU 0, wrk (-t1) pinned to CPU 1 (when the machine
#   has at least two CPUs and `taskset` exists), so each has one core. 32 keep-alive
#   connections, all from 127.0.0.1 (one key for the limiters), keep the server busy.
# - Each round starts a fresh server for each variant, in a rotated order from round to round,
#   so drift in the machine's load hits every variant alike. Per server: one request with curl
#   (the only one the denied variants allow), a warm-up run of wrk, a measured run, then SIGTERM.
# - Checked, or the script fails: the curl requests answer 200 (allowed, bare) or 200 then 429
#   (denied), and the statuses the server counted over its whole life are all 200 (allowed,
#   bare) or exactly one 200 and the rest 429 (denied).
# - Reported per variant: the median over rounds of wrk's requests/s; the median over rounds of
#   its ratio to bare's requests/s in the same round; and the median of the server's CPU time
#   per response in the measured run (user + system, from /proc/<pid>/stat).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-6}
WARMUP=${WARMUP:-1}
CONNECTIONS=${CONNECTIONS:-32}
PORT=${PORT:-38181}
VARIANTS=${VARIANTS:-"bare bare-429 tollgate-allowed tollgate-denied governor-allowed governor-denied"}
URL="http://127.0.0.1:${PORT}/"

cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl not found" >&2; exit 1; }

source benches/http_server_bin.sh

SERVER_PIN=() WRK_PIN=()
if command -v taskset >/dev/null && [[ $(nproc) -ge 2 ]]; then
    SERVER_PIN=(taskset -c 0) WRK_PIN=(taskset -c 1)
fi
TICKS=$(getconf CLK_TCK)
WORK=$(mktemp -d)
SERVER=""
cleanup() {
    if [[ -n "$SERVER" ]]; then kill "$SERVER" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

status_of() { curl -s -o /dev/null -w '%{http_code}' "$URL"; }

# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# run_one <variant> <round>: one server, one measured wrk run; appends to $WORK/results.
run_one() {
    local variant=$1 round=$2 out="$WORK/$1.$2"
    "${SERVER_PIN[@]}" "$BIN" "$variant" "$PORT" >"$out.statuses" 2>"$out.log" &
    SERVER=$!
    # Wait for the server to say it listens: a probe request would spend a denied variant's
    # one allowed request.
    for _ in $(seq 1 100); do
        grep -qs 'on http://' "$out.log" && break
        sleep 0.05
    done
    grep -q 'on http://' "$out.log" || fail "$variant: the server did not start: $(cat "$out.log")"
    local first second
    first=$(status_of)
    second=$(status_of)
    local expected
    case $variant in
        *-denied) expected="200 429" ;;
        bare-429) expected="429 429" ;;
        *) expected="200 200" ;;
    esac
    [[ "$first $second" == "$expected" ]] ||
        fail "$variant: curl got $first then $second, expected $expected"
    "${WRK_PIN[@]}" wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "$URL" >/dev/null
    local t0 t1
    t0=$(cpu_ticks "$SERVER")
    "${WRK_PIN[@]}" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "$URL" >"$out.wrk"
    t1=$(cpu_ticks "$SERVER")
    [[ $(status_of) == "$second" ]] || fail "$variant: the answer changed during the run"
    kill -TERM "$SERVER"
    wait "$SERVER" || fail "$variant: the server exited with an error: $(cat "$out.log")"
    SERVER=""

    if grep -Eq 'Socket errors' "$out.wrk"; then
        echo "warning: $variant round $round: $(grep 'Socket errors' "$out.wrk")" >&2
    fi
    local rps requests ok denied others
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out.wrk")
    requests=$(awk '/requests in/ { print $1 }' "$out.wrk")
    [[ -n $rps && -n $requests ]] || fail "$variant: could not read wrk's output: $(cat "$out.wrk")"
    ok=$(awk '$2 == 200 { print $3 }' "$out.statuses")
    denied=$(awk '$2 == 429 { print $3 }' "$out.statuses")
    others=$(awk '$2 != 200 && $2 != 429 { printf "%s:%s ", $2, $3 }' "$out.statuses")
    [[ -z $others ]] || fail "$variant: unexpected statuses $others"
    case $variant in
        *-denied) [[ ${ok:-0} == 1 && ${denied:-0} -ge $requests ]] ||
            fail "$variant: server answered ${ok:-0} x 200 and ${denied:-0} x 429, expected 1 x 200 and the rest 429" ;;
        bare-429) [[ -z $ok && ${denied:-0} -ge $requests ]] ||
            fail "$variant: server answered ${ok:-0} x 200 and ${denied:-0} x 429, expected only 429" ;;
        *) [[ -z $denied && ${ok:-0} -ge $requests ]] ||
            fail "$variant: server answered ${ok:-0} x 200 and ${denied:-0} x 429, expected only 200" ;;
    esac
    local us_per_response
    us_per_response=$(awk -v t=$((t1 - t0)) -v hz="$TICKS" -v n="$requests" \
        'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
    printf '%-18s round %d  %10.0f req/s  %6s us CPU/response  (200: %s, 429: %s)\n' \
        "$variant" "$round" "$rps" "$us_per_response" "${ok:-0}" "${denied:-0}" >&2
    echo "$variant $round $rps $us_per_response" >>"$WORK/results"
}

read -r -a variants <<<"$VARIANTS"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq 1 "$ROUNDS"); do
    # Rotate the order each round.
    n=${#variants[@]}
    for i in $(seq 0 $((n - 1))); do
        run_one "${variants[$(((i + round - 1) % n))]}" "$round"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The ratio of each round's requests/s to bare's in the same round, one line per round.
ratios() {
    awk -v v="$1" '$1 == "bare" { bare[$2] = $3 } $1 == v { rps[$2] = $3 }
        END { for (r in rps) if (bare[r] > 0) print rps[r] / bare[r] }' "$WORK/results"
}

echo
echo "wrk -t1 -c$CONNECTIONS -d${DURATION}s, $ROUNDS rounds (medians); server on 1 thread"
printf '| %-18s | %10s | %8s | %16s | %s |\n' variant "req/s" "/ bare" "µs CPU/response" "rounds (req/s)"
printf '| %-18s | %10s | %8s | %16s | %s |\n' --- ---: ---: ---: ---
for variant in "${variants[@]}"; do
    rps=$(awk -v v="$variant" '$1 == v { print $3 }' "$WORK/results" | median)
    cpu=$(awk -v v="$variant" '$1 == v { print $4 }' "$WORK/results" | median)
    cpu=$(awk -v c="$cpu" 'BEGIN { printf "%.2f", c }')
    all=$(awk -v v="$variant" '$1 == v { printf "%s%.0f", (n++ ? ", " : ""), $3 }' "$WORK/results")
    ratio=$(ratios "$variant" | median)
    ratio=$(awk -v r="${ratio:-}" 'BEGIN { if (r != "") printf "%.2fx", r; else print "-" }')
    printf '| %-18s | %10.0f | %8s | %16s | %s |\n' "$variant" "$rps" "$ratio" "$cpu" "$all"
done
