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

.PHONY: help demo test deps core-purity fmt-check clippy doc nextest doctest kill-harness-redis

help: ## List targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-20s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

demo: deps ## Five local masters, contending workers, one master killed and one paused (DEMO_SECONDS=20)
	@status=0; \
	$(CARGO) run --release -p redlock-tests --example demo || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

test: deps core-purity fmt-check clippy doc ## Everything CI checks: deps, fmt, clippy, docs, tests, doctests
	@status=0; \
	$(MAKE) --no-print-directory nextest doctest || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

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
