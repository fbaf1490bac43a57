#!/usr/bin/env bash
# Starts an in-memory sluice-limiter and Envoy with the Sluice filter on
# loopback, and prints how to try it.
# Stops everything on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${PORT:=10000}" "${ADMIN_PORT:=9901}" "${LIMITER_PORT:=8081}"
: "${ENVOY:=.venv/bin/envoy}" "${WASM:=build/sluice.wasm}" "${LIMITER:=target/release/sluice-limiter}"

RUN_DIR=build/run
mkdir -p "$RUN_DIR"
WASM_ABS="$(cd "$(dirname "$WASM")" && pwd)/$(basename "$WASM")"

# The checked-in config is written for the Docker image; point it at this
# machine's paths and ports, on loopback only.
sed -e "s#/etc/envoy/sluice.wasm#${WASM_ABS}#" \
    -e "s#address: 0.0.0.0, port_value: 10000#address: 127.0.0.1, port_value: ${PORT}#" \
    -e "s#address: 0.0.0.0, port_value: 9901#address: 127.0.0.1, port_value: ${ADMIN_PORT}#" \
    -e "s#address: sluice-limiter, port_value: 8081#address: 127.0.0.1, port_value: ${LIMITER_PORT}#" \
    envoy/envoy-global.yaml > "$RUN_DIR/envoy.yaml"

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_http() {  # url, pid, name, log
    for _ in $(seq 1 300); do
        if python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
            "$1" >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$2" 2>/dev/null; then
            echo "$3 failed to start; its log:" >&2; cat "$4" >&2; exit 1
        fi
        sleep 0.1
    done
    echo "$3 did not become ready; its log: $4" >&2; exit 1
}

"$LIMITER" --listen "127.0.0.1:${LIMITER_PORT}" --store memory >"$RUN_DIR/limiter.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:${LIMITER_PORT}/healthz" "${pids[-1]}" sluice-limiter "$RUN_DIR/limiter.log"

"$ENVOY" -c "$RUN_DIR/envoy.yaml" --concurrency 2 --disable-hot-restart \
    --log-level warn >"$RUN_DIR/envoy.log" 2>&1 &
pids+=($!)

wait_http "http://127.0.0.1:${ADMIN_PORT}/ready" "${pids[-1]}" envoy "$RUN_DIR/envoy.log"

cat <<MSG

Sluice is running: Envoy on http://127.0.0.1:${PORT} (admin http://127.0.0.1:${ADMIN_PORT}),
sluice-limiter (memory store) on http://127.0.0.1:${LIMITER_PORT}.
Envoy's configuration: envoy/envoy-global.yaml, rendered for this machine into ${RUN_DIR}/envoy.yaml.

  # per-ip: 5 requests per 10 s (GCRA) and 100 per hour; the 6th gets 429 with Retry-After
  for i in \$(seq 6); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:${PORT}/api/hello; done
  curl -i http://127.0.0.1:${PORT}/api/hello

  # the rate-limit headers on an allowed request (after the window refills)
  curl -si http://127.0.0.1:${PORT}/api/hello | grep -i ratelimit

  # per-user: 3/s with bursts of 6, keyed by x-user and method; "vip" gets 50
  curl -si -H 'x-user: alice' http://127.0.0.1:${PORT}/api/hello | grep -i ratelimit

  # per-tenant: 10 per minute across every Envoy, decided by sluice-limiter
  for i in \$(seq 11); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-tenant: acme' http://127.0.0.1:${PORT}/reports/q3; done; echo
  curl -s http://127.0.0.1:${LIMITER_PORT}/metrics | grep sluice_limiter_decisions

  # Sluice's counters
  curl -s http://127.0.0.1:${ADMIN_PORT}/stats | grep sluice

Logs: ${RUN_DIR}/envoy.log and ${RUN_DIR}/limiter.log. Press Ctrl-C to stop.
MSG

wait -n "${pids[@]}"
