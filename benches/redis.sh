#!/usr/bin/env bash
# Redis store benchmark: GCRA decisions per second through `RedisStore` (benches/redis.rs) at 1,
# 16 and 64 concurrent callers, against `redis-benchmark` sending the same EVALSHA (the real
# script, the real arguments) at the same concurrency; round trips per decision from
# INFO commandstats; and a denied key hammered by 64 callers, with and without the deny cache.
#
#   benches/redis.sh                        # 4 rounds, 1 + 3 s per run (about 4 minutes)
#   ROUNDS=5 DURATION=6 benches/redis.sh    # other settings: WARMUP, CALLERS, POOL, WORKERS
#   ONLY=leases benches/redis.sh            # only the local leases tables (about 4 minutes)
#
# Local leases (last, or alone with ONLY=leases): one hot key under a quota of 20 000 a second,
# for each of LEASE_ALGORITHMS ("fixed gcra": a fixed window, GCRA of burst 20 000), sent at
# 90 % of the quota, evenly, by CALLERS tasks in all spread over LEASE_SERVERS
# RedisStores (separate connections, as separate servers), with leases off and on
# (`local_leases(Leases::default())`), LEASE_SECONDS s each (3 by default), a fresh redis-server
# per run (pinned as below). Reported: decisions, the fraction admitted, and scripts per decision
# (EVALSHA calls in INFO commandstats over the run, the first NOSCRIPT included).
#
# Method:
# - Every run gets a fresh redis-server (--save '' --appendonly no) on a free loopback port,
#   pinned to CPU 0; the load generator (redis-benchmark, or the tollgate bench with a tokio
#   multi-thread runtime of WORKERS=1 worker) is pinned to CPU 1, when the machine has two CPUs
#   and `taskset` exists. redis-benchmark is single-threaded, so each side has one core.
# - Variants, in a rotated order each round: `redis-benchmark` (-c N -P 1, one connection per
#   caller; the script loaded with SCRIPT LOAD first, keys `tollgate:{n:__rand_int__}:bench:gcra.<fingerprint>`
#   with -r 10^11: 12 digits, as the tollgate side's keys), `tollgate` (N tasks sharing one
#   RedisStore: one multiplexed connection), `tollgate pool` (POOL stores, task i on store
#   i % POOL; 16 and 64 callers), and for reference the server's ceiling with this script,
#   redis-benchmark -c 1 -P 64 (64 requests in flight on one connection, like 64 callers on one
#   RedisStore, but sent and read in batches). The arguments for redis-benchmark are read from
#   the slow log of a probe server after one tollgate check, so both send the same bytes but
#   for the key's digits. Every check is allowed and writes its key (a 1 s TTL).
# - Both sides are measured alike, by the server: the load runs WARMUP s, then the script's runs
#   (its GET calls in INFO commandstats, one per run) are counted over the next DURATION s
#   (bash's EPOCHREALTIME); then the load generator gets SIGTERM. The denied-key rows make
#   (almost) no calls: their rate is the bench's own count, from WARMUP s after it started until
#   SIGTERM.
# - CPU per check: redis-server's and the load generator's user + system time over the window
#   (/proc/<pid>/stat), each divided by the script runs in the window.
# - Round trips per check: from INFO commandstats after the run, every command clients sent
#   over the server's life (the script's own GET, SET, DEL and TIME excluded; the runner's
#   CONFIG RESETSTAT and INFO excluded), divided by the script runs (redis-benchmark) or the
#   checks made, decisions and failed calls (tollgate, warm-up included).
# - Checked, or the script fails: no EVALSHA fails but the tollgate side's first NOSCRIPT per
#   caller, one script run per redis-benchmark EVALSHA, and every allowed-mode check allowed
#   (the tollgate bench checks it). Failed tollgate calls (none should fail: the store's
#   timeout is 1 s here) are counted and reported apart from decisions.
set -euo pipefail

ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CALLERS=${CALLERS:-"1 16 64"}
POOL=${POOL:-4}
WORKERS=${WORKERS:-1}
RANGE=100000000000

cd "$(dirname "$0")/.."
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done

echo "building benches/redis.rs (release)..." >&2
BIN=$(cargo bench --features redis --bench redis --no-run 2>&1 | tee /dev/stderr |
    sed -n 's/.*Executable .*(\(.*redis-[0-9a-f]*\)).*/\1/p' | tail -n 1)
[[ -x "$BIN" ]] || { echo "could not find the redis bench binary" >&2; exit 1; }

SERVER_PIN=() LOAD_PIN=()
if command -v taskset >/dev/null && [[ $(nproc) -ge 2 ]]; then
    SERVER_PIN=(taskset -c 0) LOAD_PIN=(taskset -c 1)
fi
TICKS=$(getconf CLK_TCK)
WORK=$(mktemp -d)
SERVER="" PORT=""
cleanup() {
    if [[ -n "$SERVER" ]]; then kill "$SERVER" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

cli() { redis-cli -p "$PORT" "$@" | tr -d '\r'; }

# A fresh redis-server on a free loopback port (tries others when the port is taken).
start_server() {
    local attempt
    for attempt in 1 2 3 4 5 6 7 8; do
        PORT=$((20000 + RANDOM % 40000))
        "${SERVER_PIN[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$WORK" >"$WORK/server.log" 2>&1 &
        SERVER=$!
        local i
        for i in $(seq 1 100); do
            if ! kill -0 "$SERVER" 2>/dev/null; then break; fi
            if [[ $(redis-cli -p "$PORT" PING 2>/dev/null) == PONG ]]; then return 0; fi
            sleep 0.02
        done
        kill "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
        SERVER=""
    done
    fail "redis-server did not start: $(cat "$WORK/server.log")"
}

stop_server() {
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
}

LEASE_SERVERS=${LEASE_SERVERS:-"1 2 4"}
LEASE_ALGORITHMS=${LEASE_ALGORITHMS:-"fixed gcra"}
LEASE_SECONDS=${LEASE_SECONDS:-3}

# The local leases table; see the header.
lease_runs() {
    local algorithm servers callers on line
    for algorithm in $LEASE_ALGORITHMS; do
    echo
    echo "Local leases ($algorithm): one hot key at 90 % of a quota of 20 000/s, sent evenly, ${LEASE_SECONDS} s per run; load average $(cut -d' ' -f1-3 /proc/loadavg)."
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' servers callers leases decisions admitted "scripts / decision" "decisions / script"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' ---: ---: --- ---: ---: ---: ---:
    for servers in $LEASE_SERVERS; do
        for callers in $CALLERS; do
            [[ $callers -ge $servers ]] || continue
            for on in off on; do
                start_server
                line=$("${LOAD_PIN[@]}" "$BIN" leases "redis://127.0.0.1:$PORT/" "$algorithm" "$servers" "$callers" "$on" "$LEASE_SECONDS") ||
                    fail "leases $algorithm $servers servers $callers callers $on: $line"
                stop_server
                awk '{ d = $8; a = $10; s = $12
                       printf "| %s | %s | %s | %d | %.2f%% | %.4f | %.0f |\n", $3, $5, $6, d, 100 * a / d, s / d, d / s }' <<<"$line"
            done
        done
    done
    done
}

if [[ ${ONLY:-} == leases ]]; then
    lease_runs
    exit 0
fi

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# `calls failed` of one command in INFO commandstats (0 0 when absent).
stat_of() {
    awk -F'[:,=]' -v c="cmdstat_$1" '$1 == c { print $3, $11; found = 1 } END { if (!found) print 0, 0 }' \
        "$2"
}

# The script and the EVALSHA as tollgate sends it, read once from a probe server.
start_server
"$BIN" script >"$WORK/script.lua"
mapfile -t EVALSHA < <("$BIN" args "redis://127.0.0.1:$PORT/")
stop_server
SHA=${EVALSHA[1]}
[[ ${EVALSHA[0]^^} == EVALSHA && ${EVALSHA[2]} == 2 && ${EVALSHA[3]} == 'tollgate:{n:100000000000}:bench:gcra.'* &&
    ${EVALSHA[4]} == 'tollgate:{n:100000000000}:bench:block' ]] ||
    fail "unexpected probe command: ${EVALSHA[*]}"
# What follows the client's key: the policy, the algorithm and its parameters' fingerprint; then
# the key's block (redis-benchmark may draw another number for it: only its GET is measured).
KEY_TAIL=${EVALSHA[3]#'tollgate:{n:100000000000}'}
BLOCK_TAIL=${EVALSHA[4]#'tollgate:{n:100000000000}'}
BENCH_ARGS=(EVALSHA "$SHA" 2 "tollgate:{n:__rand_int__}$KEY_TAIL" "tollgate:{n:__rand_int__}$BLOCK_TAIL" "${EVALSHA[@]:5}")
echo "redis-benchmark sends: ${BENCH_ARGS[*]} (ARGV 3 and 4 are empty strings)" >&2

now() { echo "$EPOCHREALTIME"; }

# Script runs so far (the script's GET calls).
script_runs() { cli INFO commandstats | awk -F'[:,=]' '$1 == "cmdstat_get" { n = $3 } END { print n + 0 }'; }

# run_one <variant> <callers> <round>: one fresh server, one load run; appends to $RESULTS:
# variant callers round rate checks round-trips/check script-runs/check server-µs/check
# client-µs/check errors slowest-ms.
run_one() {
    local variant=$1 callers=$2 round=$3 out="$WORK/run"
    start_server
    if [[ $variant == redis-benchmark* ]]; then
        [[ $(cli -x SCRIPT LOAD <"$WORK/script.lua") == "$SHA" ]] || fail "SCRIPT LOAD gave another SHA"
    fi
    cli CONFIG RESETSTAT >/dev/null
    local load mode=allowed stores=1
    case $variant in
        redis-benchmark | redis-benchmark-pipelined)
            local connections=$callers depth=1
            [[ $variant == redis-benchmark-pipelined ]] && connections=1 depth=$callers
            "${LOAD_PIN[@]}" redis-benchmark -p "$PORT" -c "$connections" -n 1000000000 -P "$depth" \
                -r "$RANGE" -q "${BENCH_ARGS[@]}" >"$out.txt" 2>&1 &
            load=$! ;;
        tollgate | tollgate-pool | denied | denied-nocache)
            [[ $variant == tollgate-pool ]] && stores=$POOL
            [[ $variant == denied* ]] && mode=$variant
            # Ended by SIGTERM once the runner has read the counts (an hour at the most).
            "${LOAD_PIN[@]}" "$BIN" run "redis://127.0.0.1:$PORT/" "$mode" "$callers" "$stores" \
                "$WORKERS" "$WARMUP" 3600 >"$out.txt" 2>"$out.err" &
            load=$! ;;
        *) fail "unknown variant $variant" ;;
    esac
    sleep "$WARMUP"
    local t0 t1 s0 s1 c0 c1 r0 r1
    kill -0 "$load" 2>/dev/null || fail "$variant: the load generator ended early: $(cat "$out.txt" "$out.err" 2>/dev/null)"
    r0=$(script_runs) t0=$(now) s0=$(cpu_ticks "$SERVER") c0=$(cpu_ticks "$load")
    sleep "$DURATION"
    r1=$(script_runs) t1=$(now) s1=$(cpu_ticks "$SERVER") c1=$(cpu_ticks "$load")
    kill -TERM "$load"
    if [[ $variant == redis-benchmark* ]]; then
        wait "$load" 2>/dev/null || true
    else
        wait "$load" || fail "$variant, $callers callers: $(cat "$out.txt" "$out.err")"
    fi
    cli INFO commandstats >"$out.stats"
    stop_server

    local runs rate checks errors=0 slowest=-
    runs=$((r1 - r0))
    rate=$(awk -v n="$runs" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f", n / (t1 - t0) }')
    local evalsha failed gets
    read -r evalsha failed < <(stat_of evalsha "$out.stats")
    read -r gets _ < <(stat_of get "$out.stats")
    if [[ $variant == redis-benchmark* ]]; then
        [[ $failed == 0 && $gets == "$evalsha" ]] ||
            fail "$variant: $failed of $evalsha EVALSHA failed, $gets script runs"
        checks=$gets
    else
        local decisions
        decisions=$(awk '$1 == "decisions" { print $8 }' "$out.txt")
        errors=$(awk '$1 == "decisions" { print $10 }' "$out.txt")
        slowest=$(awk '$1 == "decisions" { print $12 }' "$out.txt")
        [[ -n $decisions ]] || fail "$variant: could not read the output: $(cat "$out.txt" "$out.err")"
        checks=$((decisions + errors))
        # Only a caller's first EVALSHA may fail (NOSCRIPT, then SCRIPT LOAD and again).
        [[ $failed -le $callers ]] || fail "$variant: $failed EVALSHA failed"
        if [[ $errors != 0 ]]; then
            echo "warning: $variant, $callers callers, round $round: $errors calls failed; $(grep -m1 'first error' "$out.err")" >&2
        fi
        if [[ $variant == denied ]]; then
            # Next to no script runs: the bench's own rate.
            rate=$(awk '$1 == "decisions" { print $6 }' "$out.txt")
            runs=$(awk -v r="$rate" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f", r * (t1 - t0) }')
        fi
    fi
    local trips
    trips=$(awk -F'[:,=]' '/^cmdstat_/ {
            name = substr($1, 9)
            if (name != "get" && name != "set" && name != "del" && name != "time" &&
                name != "config|resetstat" && name != "info") sum += $3
        } END { print sum + 0 }' "$out.stats")
    local line
    line=$(awk -v v="$variant" -v c="$callers" -v r="$round" -v rate="$rate" -v n="$checks" \
        -v e="$errors" -v slow="$slowest" -v trips="$trips" -v gets="$gets" -v runs="$runs" \
        -v st=$((s1 - s0)) -v ct=$((c1 - c0)) -v hz="$TICKS" \
        'BEGIN { per = runs > 0 ? 1e6 / hz / runs : 0
                 printf "%s %s %s %.0f %d %.6f %.6f %.2f %.2f %d %s", v, c, r, rate, n,
                 trips / n, gets / n, st * per, ct * per, e, slow }')
    echo "$line" >>"$RESULTS"
    # shellcheck disable=SC2086
    printf '%-16s %2d callers round %s %9.0f decisions/s  %s round trips and %s script runs per check  %s µs server CPU, %s µs client CPU per check  %s errors  slowest %s ms\n' \
        $(awk '{ print $1, $2, $3, $4, $6, $7, $8, $9, $10, $11 }' <<<"$line") >&2
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
RUNS=()
for c in $CALLERS; do
    RUNS+=("redis-benchmark $c" "tollgate $c")
    [[ $c -gt 1 && $POOL -gt 1 ]] && RUNS+=("tollgate-pool $c")
done
# A reference for the server's ceiling with this script: the same requests pipelined 64 deep
# on one connection (as many in flight as the tollgate side's 64 callers on one connection).
RUNS+=("redis-benchmark-pipelined 64" "denied 64" "denied-nocache 64")

RESULTS=$WORK/results

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    n=${#RUNS[@]}
    for i in $(seq 0 $((n - 1))); do
        run=${RUNS[$(((i + round - 1) % n))]}
        read -r variant c <<<"$run"
        run_one "$variant" "$c" "$round"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column() { awk -v v="$1" -v c="$2" -v f="$3" '$1 == v && $2 == c { print $f }' "$RESULTS"; }

echo
echo "GCRA on the Redis store, $ROUNDS rounds of ${DURATION} s after ${WARMUP} s of warm-up, medians; a check is a decision or a failed call."
echo "redis-server on CPU 0, load generator on CPU 1 (tollgate: $WORKERS tokio worker thread); pool: $POOL RedisStores."
printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' callers side "decisions/s" "/ redis-benchmark" \
    "each round / redis-benchmark" "round trips / check" "server µs / check" "client µs / check" errors \
    "slowest (ms)" "rounds (decisions/s)"
printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' ---: --- ---: ---: --- ---: ---: ---: ---: ---: ---
for run in "${RUNS[@]}"; do
    read -r variant c <<<"$run"
    rate=$(column "$variant" "$c" 4 | median)
    base=$(column redis-benchmark "$c" 4 | median)
    trips=$(column "$variant" "$c" 6 | median)
    server=$(column "$variant" "$c" 8 | median)
    client=$(column "$variant" "$c" 9 | median)
    errors=$(column "$variant" "$c" 10 | awk '{ n += $1 } END { print n + 0 }')
    slowest=$(column "$variant" "$c" 11 | sort -g | tail -n 1)
    [[ $slowest == - ]] || slowest=$(printf '%.0f' "$slowest")
    all=$(column "$variant" "$c" 4 | paste -sd, | sed 's/,/, /g')
    ratio=$(awk -v a="$rate" -v b="${base:-0}" -v v="$variant" \
        'BEGIN { if (b > 0 && v !~ /^denied/) printf "%.2fx", a / b; else print "-" }')
    trips=$(awk -v t="$trips" 'BEGIN { printf (t < 0.01 ? "%.1e" : "%.4f"), t }')
    # Each round's rate over redis-benchmark's in the same round (same callers).
    rounds=$(awk -v v="$variant" -v c="$c" '$2 == c && $1 == "redis-benchmark" { b[$3] = $4 }
            $2 == c && $1 == v { r[$3] = $4 }
            END { for (i = 1; i in r; i++) printf "%s%s", (i > 1 ? ", " : ""),
                  (v ~ /^denied/ || !(i in b) ? "-" : sprintf("%.2f", r[i] / b[i])) }' "$RESULTS")
    case $variant in
        redis-benchmark) side="redis-benchmark -c $c -P 1" ;;
        redis-benchmark-pipelined) side="redis-benchmark -c 1 -P $c" ;;
        tollgate) side="tollgate, one RedisStore" ;;
        tollgate-pool) side="tollgate, $POOL RedisStores" ;;
        denied) side="tollgate, one denied key" ;;
        denied-nocache) side="tollgate, one denied key, deny_cache(0)" ;;
    esac
    printf '| %s | %s | %.0f | %s | %s | %s | %.1f | %.1f | %s | %s | %s |\n' "$c" "$side" "$rate" \
        "$ratio" "$rounds" "$trips" "$server" "$client" "$errors" "$slowest" "$all"
done

lease_runs
