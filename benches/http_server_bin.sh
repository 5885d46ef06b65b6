# Sourced by benches/http.sh and benches/http_ir.sh: sets BIN to the http_server bench binary,
# $HTTP_SERVER when set (a server already built, say of another commit), else this tree's,
# built in release. Run from the repository's root.
if [[ -n ${HTTP_SERVER:-} ]]; then
    BIN=$HTTP_SERVER
else
    echo "building benches/http_server.rs (release)..." >&2
    BIN=$(cargo bench --bench http_server --no-run 2>&1 | tee /dev/stderr |
        sed -n 's/.*Executable .*(\(.*http_server-[0-9a-f]*\)).*/\1/p' | tail -n 1)
fi
[[ -x "$BIN" ]] || { echo "could not find the http_server binary ($BIN)" >&2; exit 1; }
