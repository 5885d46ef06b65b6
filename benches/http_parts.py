#!/usr/bin/env python3
"""Instructions per HTTP response by part, from the callgrind runs `benches/http_ir.sh` keeps.

    KEEP=/tmp/ir benches/http_ir.sh
    benches/http_parts.py /tmp/ir [variant ...]   # default: bare governor-allowed tollgate-allowed

Each function's self cost (`callgrind_annotate --inclusive=no`) is taken per response the way
http_ir.sh takes the total: (the long run's - the short run's) / (their responses' difference),
which cancels the server's start and stop. Functions are grouped into parts by name (first
pattern that matches); the table gives each variant's instructions per response by part, and
each part's difference over the first variant (bare axum).
"""
import re
import subprocess
import sys
from pathlib import Path

PARTS = [
    ("the rate limit headers", r"HeaderWriter|header::map|HeaderName|Text as core::fmt|itoa|"
     r"bytes::bytes|add_headers_since|Http1Transaction>::encode|for_limit"),
    ("the decision in the extensions", r"hand_on|extensions::Extensions|hashbrown|"
     r"drop_in_place<tollgate::decision::Decision>"),
    ("the check: key, clock, store", r"Limit>::check|Limit>::now|memory::|peer::|PeerIp|"
     r"arc_swap|quanta|clock|governor::state|sip::Hasher|"
     r"Governor<K,M,S,RespBody> as core::clone|tower_governor::<impl"),
    ("the layer's future, body and service", r"layer::future|layer::service|"
     r"layer::response::Responder::admit|layer::body|map_err|drop_in_place<tollgate|"
     r"IntoFuture|Body::new|drop_in_place<core::future::ready|"
     r"drop_in_place<core::option::Option<tollgate|drop_in_place<tower_governor"),
    ("memcpy", r"memcpy|memmove"),
    ("the allocator", r"malloc|free|__rust_alloc|__rdl_alloc|__rust_dealloc|__rdl_dealloc|arena"),
]
OTHER = "the rest (axum, hyper, tokio)"
LINE = re.compile(r"\s*([\d,]+) \([\s\d.]+%\)\s+(?:\*\s+)?(.*)")


def self_costs(out: Path) -> dict:
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=no", str(out)],
        check=True, capture_output=True, text=True).stdout
    costs = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            name = re.sub(r"\s*\[.*\]$", "", m.group(2)).strip()
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def per_response(keep: Path, variant: str) -> dict:
    runs = sorted(keep.glob(f"{variant}-*.out"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    if len(runs) < 2:
        sys.exit(f"{keep}: no short and long run of {variant} (run KEEP={keep} http_ir.sh)")
    short, long = runs[0], runs[-1]
    n_short = int(short.with_suffix(".responses").read_text())
    n_long = int(long.with_suffix(".responses").read_text())
    if n_long <= n_short:
        sys.exit(f"{variant}: the long run served no more responses than the short one")
    a, b = self_costs(short), self_costs(long)
    return {k: (b.get(k, 0) - a.get(k, 0)) / (n_long - n_short) for k in set(a) | set(b)}


def by_part(costs: dict) -> dict:
    parts = {name: 0.0 for name, _ in PARTS}
    parts[OTHER] = 0.0
    for function, cost in costs.items():
        if function == "PROGRAM TOTALS":
            continue
        part = next((name for name, pattern in PARTS if re.search(pattern, function)), OTHER)
        parts[part] += cost
    parts["total"] = costs.get("PROGRAM TOTALS", 0.0)
    return parts


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    keep = Path(sys.argv[1])
    variants = sys.argv[2:] or ["bare", "governor-allowed", "tollgate-allowed"]
    tables = {v: by_part(per_response(keep, v)) for v in variants}
    base = tables[variants[0]]
    header = ["part"] + variants + [f"{v} - {variants[0]}" for v in variants[1:]]
    print("| " + " | ".join(header) + " |")
    print("| --- |" + " ---: |" * (len(header) - 1))
    for part in base:
        row = [f"{tables[v][part]:.0f}" for v in variants]
        row += [f"{tables[v][part] - base[part]:.0f}" for v in variants[1:]]
        print(f"| {part} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
