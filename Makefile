# dlock's build entry points. `make test` (the default) is what the README and
# CI (.ci/run) run: it installs what the tests need, then vets and tests every
# Go module in the repository with the race detector.
#
# Tests start real redis-server processes (internal/redistest), so the machine
# needs redis-server and redis-cli; -race needs cgo, so it needs a C compiler.
# Both are installed with apt-get when missing (as root, or through sudo).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

# Every library module builds and tests against its own go.mod, as its users
# get it (go.work would resolve one set of versions for all of them); the
# CLI's module, which has no replace directive (see cmd/dlock/go.mod), builds
# against the library beside it through go.work.
export GOWORK := off
WORKSPACE := GOWORK=$(CURDIR)/go.work
# GOENV is the go command's environment in the loops' module $$m.
GOENV = env $$(if [ "$$m" = ./cmd/dlock ]; then echo $(WORKSPACE); else echo GOWORK=off; fi)

GO ?= go
TEST_TIMEOUT ?= 15m
TESTFLAGS ?=
# TEST_PARALLEL is go test's -parallel: how many tests that call t.Parallel
# run at once in one package (go test's default is GOMAXPROCS). The root
# package's tests mostly wait (for TTLs, timeouts, failovers), so four at a
# time, each on servers or names of its own, keep its run under -race near
# 190 s on a 2-core machine (docs/reliability.md, "Tests run beside each
# other").
TEST_PARALLEL ?= 4

# The root module (".") and every nested one (a directory with its own
# go.mod, such as bench/ or adapters/*), skipping hidden directories,
# testdata and vendor. `go test ./...` in the root does not enter them.
MODULES = $(shell find . -mindepth 1 \( -path './.*' -o -name testdata -o -name vendor \) -prune \
	-o -name go.mod -print | sed 's|/go.mod$$||' | sort)

# apt-get as root, or through sudo otherwise.
define apt_install
	if [ "$$(id -u)" -eq 0 ]; then sudo=; \
	elif command -v sudo >/dev/null; then sudo=sudo; \
	else echo "error: need root or sudo to install $(1)" >&2; exit 1; fi; \
	echo "==> apt-get update"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
	echo "==> apt-get install -y $(1)"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(1)
endef

.DEFAULT_GOAL := test
.PHONY: test vet redis cc tmux

## test: install redis-server, tmux and a C compiler if missing, then go vet and go test -race in every module
test: redis tmux cc vet
	@for m in $(MODULES); do \
		echo "==> go test $(strip -race -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(TESTFLAGS)) ./...   (module $$m)"; \
		(cd "$$m" && $(GOENV) $(GO) test -race -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./...); \
	done
	@echo "==> all tests passed"

## vet: go vet in every module, for this platform
# -race: vet builds every dependency to read its export data; with the
# test step's build flags those builds are the ones go test -race reuses
# from the build cache, instead of compiling everything twice. -race needs
# cgo, hence cc.
vet: cc
	@for m in $(MODULES); do \
		echo "==> go vet -race ./...   (module $$m)"; \
		(cd "$$m" && $(GOENV) $(GO) vet -race ./...); \
	done

# lint: staticcheck in every module, at a pinned version fetched through the
# module proxy (not part of `make test`: CI's Go may be older than this
# staticcheck needs, and a tool's new checks must not turn CI red on their own).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
.PHONY: lint

## lint: staticcheck in every module, and go vet for macOS and Windows
lint:
	@for m in $(MODULES); do \
		echo "==> staticcheck ./...   (module $$m)"; \
		(cd "$$m" && $(GOENV) $(GO) run $(STATICCHECK) ./...); \
	done
	@# Developers on macOS run the tests too: their build must not rot.
	@for m in $(MODULES); do \
		echo "==> GOOS=darwin go vet ./...   (module $$m)"; \
		(cd "$$m" && $(GOENV) GOOS=darwin $(GO) vet ./...); \
	done
	@# The library is used on Windows too (the tests need Debian's
	@# redis-server, but the module, tests included, must build there).
	@for m in . ./cmd/dlock; do \
		echo "==> GOOS=windows go vet ./...   (module $$m)"; \
		(cd "$$m" && $(GOENV) GOOS=windows $(GO) vet ./...); \
	done

## redis: install redis-server (which brings redis-cli) with apt-get if it is missing
redis:
	@if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then \
		echo "==> using $$(command -v redis-server): $$(redis-server --version)"; \
	else \
		echo "==> redis-server not found: installing it"; \
		$(call apt_install,redis-server); \
		command -v redis-server >/dev/null || { echo "error: redis-server still not on PATH" >&2; exit 1; }; \
		echo "==> installed $$(redis-server --version)"; \
	fi

## tmux: install tmux with apt-get if it is missing (cmd/dlock's tests drive "dlock top" in a tmux pane)
tmux:
	@if command -v tmux >/dev/null; then \
		echo "==> using $$(command -v tmux): $$(tmux -V)"; \
	else \
		echo "==> tmux not found: installing it"; \
		$(call apt_install,tmux); \
	fi

## cc: install gcc with apt-get if cgo has no C compiler (go test -race needs one)
cc:
	@cc="$$($(GO) env CC)"; cc="$${cc%% *}"; \
	if command -v "$${cc:-gcc}" >/dev/null; then \
		echo "==> using C compiler $$(command -v "$${cc:-gcc}") for -race"; \
	else \
		echo "==> no C compiler for cgo (go test -race needs one): installing gcc"; \
		$(call apt_install,gcc libc6-dev); \
	fi

# bench: the side-by-side benchmarks against the peers (module bench/, which
# starts its own redis-server processes). The server's instructions per pair
# are counted first (as make instructions does), then the Go benchmarks (ns, B
# and allocs per pair, BENCH_COUNT passes over every target), then TestReport runs every
# scenario five times and writes docs/benchmarks.md and its chart. Raw
# results stay in bench/results/ (ignored by git). About 30 minutes on two
# cores; BENCHFLAGS passes flags to TestReport, e.g. '-reps 3' (about 18
# minutes, with wider ranges: the one-goroutine ratios move by up to a fifth
# from run to run) or '-scale 2'.
BENCHFLAGS ?=
BENCH_COUNT ?= 3
.PHONY: bench

## bench: run the benchmarks against redsync, redislock, rueidislock and a raw go-redis floor; write docs/benchmarks.md (installs valgrind if missing)
bench: redis valgrind
	@mkdir -p bench/results
	@echo "==> go test -run TestServerInstructions -args -instructions   (module bench)"
	cd bench && $(GO) test -run '^TestServerInstructions$$' -count 1 . -args -instructions -instructions-out results/instructions.json
	@# BENCH_COUNT passes of -count 1, not one -count pass: a target's runs
	@# then spread over the whole time instead of following each other, so
	@# the machine's drift meets every target alike.
	@: > bench/results/gobench.txt
	@for i in $$(seq $(BENCH_COUNT)); do \
		echo "==> go test -bench Uncontended -benchmem, pass $$i of $(BENCH_COUNT)   (module bench)"; \
		(cd bench && $(GO) test -run '^$$' -bench '^BenchmarkUncontended$$' -benchmem -count 1 -timeout 30m .) | tee -a bench/results/gobench.txt; \
	done
	@echo "==> go test -run TestReport -args -report   (module bench)"
	cd bench && $(GO) test -run '^TestReport$$' -count 1 -timeout 90m -v . -args -report -gobench results/gobench.txt -instructions-from results/instructions.json -out ../docs $(BENCHFLAGS)
	@echo "==> wrote docs/benchmarks.md and docs/benchmarks-contended.png"

# instructions: redis-server's instructions per uncontended lock+unlock pair
# for every target, counted under valgrind's callgrind (TestServerInstructions
# in bench/). Unlike timings, the count repeats to within about 1% on a noisy
# machine, so it shows what a change to a script costs the server. About a
# minute; INSTRUCTIONSFLAGS passes flags, e.g. '-targets floor,dlock -pairs 5000'.
INSTRUCTIONSFLAGS ?=
.PHONY: instructions valgrind

## instructions: count redis-server's instructions per lock+unlock pair of every target under callgrind (installs valgrind if missing)
instructions: redis valgrind
	cd bench && $(GO) test -run '^TestServerInstructions$$' -count 1 -v . -args -instructions $(INSTRUCTIONSFLAGS)

## valgrind: install valgrind with apt-get if it is missing (make instructions needs it)
valgrind:
	@if command -v valgrind >/dev/null && command -v callgrind_control >/dev/null; then \
		echo "==> using $$(valgrind --version)"; \
	else \
		echo "==> valgrind not found: installing it"; \
		$(call apt_install,valgrind); \
	fi

# chaos: the long tier of the fault-injection suite (chaos*_test.go, see
# docs/reliability.md). Every scenario runs at the trial counts the document
# publishes, then the figures it measured are written into
# docs/reliability.md (between its chaos:begin/end markers), and each fuzz
# target runs for CHAOS_FUZZTIME. `make test` runs the same scenarios as a
# short tier. The long tier runs without -race by default, since the race
# detector's slowdown would distort the timing figures; CHAOS_FLAGS=-race
# adds it. CHAOS_SEED replays a run; CHAOS_RUN selects scenarios.
CHAOS_TIMEOUT ?= 60m
CHAOS_FUZZTIME ?= 30s
CHAOS_FLAGS ?=
CHAOS_RUN ?= ^TestChaos
CHAOS_SEED ?=
CHAOS_DIR := .cache/chaos
.PHONY: chaos

## chaos: run the fault-injection suite's long tier and fuzzers; update the figures in docs/reliability.md
chaos: redis cc
	@rm -rf $(CHAOS_DIR) && mkdir -p $(CHAOS_DIR)
	@echo "==> go test -run '$(CHAOS_RUN)' with DLOCK_CHAOS=long   (figures into $(CHAOS_DIR), log in $(CHAOS_DIR)/test.log)"
	@set +e; start=$$(date +%s); \
	DLOCK_CHAOS=long DLOCK_CHAOS_REPORT=$(CURDIR)/$(CHAOS_DIR) DLOCK_CHAOS_SEED=$(CHAOS_SEED) \
		$(GO) test $(CHAOS_FLAGS) -count=1 -timeout $(CHAOS_TIMEOUT) -run '$(CHAOS_RUN)' -v . \
		2>&1 | tee $(CHAOS_DIR)/test.log | grep --line-buffered -E '^(=== RUN|--- |\s+--- |PASS|FAIL|ok|panic)|chaos: seed'; \
	status=$${PIPESTATUS[0]}; took=$$(( $$(date +%s) - start )); \
	$(GO) run ./internal/chaos/cmd/chaosreport -dir $(CHAOS_DIR) -doc docs/reliability.md -took $${took}s || status=1; \
	for f in FuzzScriptReplies FuzzArguments FuzzRedlockReply; do \
		echo "==> go test -fuzz $$f -fuzztime $(CHAOS_FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(CHAOS_FUZZTIME) . || status=1; \
	done; \
	echo "==> go test -fuzz FuzzGrantMessage -fuzztime $(CHAOS_FUZZTIME)   (package internal/notify)"; \
	$(GO) test -run '^$$' -fuzz '^FuzzGrantMessage$$' -fuzztime $(CHAOS_FUZZTIME) ./internal/notify || status=1; \
	for f in FuzzParseReplies FuzzMarkKey; do \
		echo "==> go test -fuzz $$f -fuzztime $(CHAOS_FUZZTIME)   (package fence)"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(CHAOS_FUZZTIME) ./fence || status=1; \
	done; \
	if [ $$status -ne 0 ]; then echo "==> chaos: FAILED (test log: $(CHAOS_DIR)/test.log); figures written to docs/reliability.md"; exit $$status; fi; \
	echo "==> chaos: passed; figures written to docs/reliability.md"
