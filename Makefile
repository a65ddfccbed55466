# The single entry point for checks. `make test` is what CI runs (.ci/run).

CARGO ?= cargo
NEXTEST_PROFILE ?= ci

# Where the test harness (redlock-tests) puts every redis-server's data dir.
# Exported so the harness and the cleanup step agree on it.
HARNESS_ROOT ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/redis-harness
export REDLOCK_HARNESS_DIR := $(HARNESS_ROOT)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# Prerequisites of `test` are steps in order, never run in parallel.
.NOTPARALLEL:

.PHONY: help demo bench bench-quick test deps core-purity fmt-check clippy doc nextest doctest kill-harness-redis chaos chaos-ci

help: ## List targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-20s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

demo: deps ## Five local masters, contending workers, one master killed and one paused (DEMO_SECONDS=20)
	@status=0; \
	$(CARGO) run --release -p redlock-tests --example demo || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# Benchmarks (benches/): the core's micro-benchmarks, then this library against
# rslock and raw SET NX PX on local masters the program starts itself. The
# last line of either target is `bench summary: ...`. BENCH_ARGS is passed
# to the program, for example BENCH_ARGS="--nodes 3" (1, 3, 5 or 7 masters).
BENCH_ARGS ?=
BENCH_QUICK_DIR ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/bench-quick

bench: deps ## Full benchmark run, a few minutes; tables and chart in benches/results/ (BENCH_ARGS="--nodes 3")
	@status=0; \
	mkdir -p benches/results; \
	$(CARGO) bench --profile release -p redlock-benches --bench core | tee benches/results/core.txt || status=$$?; \
	BENCH_COMMAND="make bench$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- $(BENCH_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

bench-quick: deps ## The same in a few seconds per scenario, as CI runs it; results in target/bench-quick/
	@status=0; \
	mkdir -p "$(BENCH_QUICK_DIR)"; \
	$(CARGO) bench --profile release -p redlock-benches --bench core -- --sample-count 20 | tee "$(BENCH_QUICK_DIR)/core.txt" || status=$$?; \
	BENCH_COMMAND="make bench-quick$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --quick --out "$(BENCH_QUICK_DIR)" $(BENCH_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

test: deps core-purity fmt-check clippy doc ## Everything CI checks: deps, fmt, clippy, docs, tests, doctests, chaos (CI schedule), bench-quick
	@status=0; \
	$(MAKE) --no-print-directory nextest doctest chaos-ci bench-quick || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

chaos: deps ## The whole chaos suite: process-level faults, plus compose faults where Docker runs (CHAOS_SEED=N replays)
	@status=0; \
	CARGO="$(CARGO)" scripts/chaos.sh full || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

chaos-ci: ## The chaos suite's shorter schedule, as `make test` runs it
	@CARGO="$(CARGO)" scripts/chaos.sh ci

deps: ## Install redis-server, redis-cli and cargo-nextest when missing
	@CARGO="$(CARGO)" scripts/ensure-deps.sh

core-purity: ## redlock-core has no runtime, Redis, socket, clock or OS-RNG dependency
	@CARGO="$(CARGO)" scripts/check-core-purity.sh

fmt-check: ## cargo fmt --check on the whole workspace
	$(CARGO) fmt --all -- --check

clippy: ## cargo clippy on all targets, warnings are errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

doc: ## cargo doc, warnings are errors
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

nextest: ## Unit and integration tests under nextest (profile ci by default)
	$(CARGO) nextest run --workspace --all-targets --profile $(NEXTEST_PROFILE)

doctest: ## Documentation examples (nextest does not run them)
	$(CARGO) test --workspace --doc

kill-harness-redis: ## Kill redis-server processes that finished tests left behind
	@scripts/kill-harness-redis.sh "$(HARNESS_ROOT)"
