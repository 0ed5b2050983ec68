# wasp — WebAssembly Service Proxy.
#
#   make demo      wasp programming a throwaway two-node lab (Linux, root or sudo; PROXY_MODE=iptables)
#   make explain   run wasp's module chain on the bundled sample cluster
#   make test      everything CI runs: checks, module drift, unit, kernel, fuzz and end-to-end tests
#   make fuzz      every fuzz target for FUZZTIME each (default 8s)
#   make check     gofmt, go vet, staticcheck, cross-builds, go mod tidy
#   make modules   rebuild the default modules, Go and Rust builds, from their sources (rustc 1.63)
#   make rust      the Rust SDK's tests and example (rustc, libstd-rust-dev-wasm32)
#   make bench     the hot-path benchmarks (see docs/performance.md)
#   make e2e       end-to-end tests against a real etcd + kube-apiserver (see test/README.md)
#   make soak      the fault and churn end-to-end tests for longer (SOAK=10m; see docs/reliability.md), then the sandbox fuzzer
#   make bench-e2e wasp vs upstream kube-proxy end to end, 100 to 10k Services (see docs/performance.md)

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
PLATFORMS   := linux/amd64 linux/arm64 windows/amd64
MODULES     := topology trafficpolicy selection
BENCHTIME   ?= 10x
# FUZZTIME: how long make fuzz runs each fuzz target; 12 targets at 8s
# take about 3 minutes on 2 cores, builds included. FUZZ_ONLY: the names
# of the targets to run (default: all); FUZZFLAGS: more go test flags.
FUZZTIME    ?= 8s
FUZZ_ONLY   ?=
FUZZFLAGS   ?=
# BUILD_TAGS: grpcnotrace keeps gRPC (a dependency of the Sigstore
# verification libraries) from importing golang.org/x/net/trace, whose
# html/template calls reflect's MethodByName: that alone makes the linker
# keep every exported method of every type, nearly doubling the binary
# (43 to 85 MB of text) and adding about 17 MB of RSS at start.
# TestBinaryDeadCodeElimination guards it.
BUILD_TAGS  := grpcnotrace

.PHONY: all demo explain build test unit fuzz rust e2e check fmt vet lint cross tidy modules modules-check bench clean

all: check unit

# PROXY_MODE: the demo's proxy mode (make demo PROXY_MODE=iptables); empty:
# wasp's default, nftables.
PROXY_MODE ?=
DEMO_ARGS   = $(if $(PROXY_MODE),--proxy-mode $(PROXY_MODE))

demo: build ## wasp run on a lab of network namespaces, requests to its Services, then teardown (needs root; PROXY_MODE=iptables).
	@if [ "$$(id -u)" = 0 ]; then bin/wasp demo $(DEMO_ARGS); \
	elif command -v sudo >/dev/null; then echo "wasp demo creates network namespaces and programs their dataplane: running it with sudo"; sudo bin/wasp demo $(DEMO_ARGS); \
	else bin/wasp demo $(DEMO_ARGS); fi

explain: ## Run the module chain on the bundled sample cluster.
	$(GO) run ./cmd/wasp explain --node node-a -o table

build:
	$(GO) build -tags $(BUILD_TAGS) -o bin/wasp ./cmd/wasp

test: check modules-check rust unit fuzz e2e

unit:
	$(GO) test -count=1 ./...
	cd test && $(GO) vet ./... && $(GO) test -count=1 ./...

fuzz: ## Every fuzz target of the repository (every func Fuzz in a _test.go) for FUZZTIME; a failing input is saved under its package's testdata/fuzz.
	@set -e; log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	git grep -n '^func Fuzz' -- '*_test.go' | while IFS=: read -r file _ decl; do \
		name=$${decl#func }; name=$${name%%(*}; dir=$${file%/*}; \
		case " $(FUZZ_ONLY) " in "  "|*" $$name "*) ;; *) continue;; esac; \
		echo "fuzz ./$$dir $$name ($(FUZZTIME))"; \
		if $(GO) -C $$dir test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) . >$$log 2>&1; then tail -n 1 $$log; continue; fi; \
		cat $$log; \
		if grep -qx '    context deadline exceeded' $$log && [ -z "$$(git status --porcelain -- $$dir/testdata/fuzz/$$name)" ]; then \
			echo "fuzz $$name: no failing input; Go's fuzzing stopped on its own deadline (golang/go#75804, fixed in Go 1.27): not a failure"; \
			continue; \
		fi; \
		exit 1; \
	done

rust: ## The Rust SDK's tests (golden vectors, natively and in Wasm) and its example, built with rustc: required here, skipped by unit without the toolchain.
	WASP_RUST=1 $(GO) test -count=1 ./sdk/rust/ ./examples/rust-prefer-local/

e2e: ## The end-to-end tests against a real etcd and kube-apiserver (builds them once: minutes).
	cd test && WASP_E2E=1 $(GO) test -count=1 -timeout 40m ./controlplane/ ./e2e/

# SOAK: how long make soak runs the fault and churn tests (a Go duration,
# at most 2h): half of it churn, the rest repeated kills of wasp.
# SOAK_FUZZTIME: how long it then fuzzes the module sandbox (FuzzSandbox
# in host/runtime); a new interesting input is minimised for at most 10s,
# not the default minute, since the inputs that reach a deadline take a
# few hundred milliseconds each.
SOAK ?= 10m
SOAK_FUZZTIME ?= $(SOAK)

.PHONY: soak
soak: ## The fault and churn end-to-end tests for longer: SOAK=10m (at most 2h; root), then the sandbox fuzzer for SOAK_FUZZTIME (default SOAK).
	cd test && WASP_E2E=1 WASP_SOAK=$(SOAK) $(GO) test -count=1 -v -timeout 4h -run 'TestFaults|TestChurn' ./e2e/
	$(MAKE) fuzz FUZZ_ONLY=FuzzSandbox FUZZTIME=$(SOAK_FUZZTIME) FUZZFLAGS='-fuzzminimizetime 10s'

.PHONY: bench-e2e
bench-e2e: ## wasp vs upstream kube-proxy, end to end (root; about an hour; WASP_PERF_SIZES=1000 for less).
	cd test && WASP_PERF=1 $(GO) test -count=1 -v -timeout 180m -run TestScale ./perf/

check: fmt vet lint cross tidy

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./sdk/... ./modules/... ./examples/...

lint:
	$(GO) run $(STATICCHECK) ./...

cross:
	@set -e; for p in $(PLATFORMS); do \
		echo "build $$p"; GOOS=$${p%/*} GOARCH=$${p#*/} CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/wasp; \
	done

tidy:
	@tmp=$$(mktemp -d) && cp go.mod go.sum $$tmp/ && $(GO) mod tidy && \
	if ! cmp -s go.mod $$tmp/go.mod || ! cmp -s go.sum $$tmp/go.sum; then \
		diff -u $$tmp/go.mod go.mod; cp $$tmp/go.mod $$tmp/go.sum .; rm -rf $$tmp; \
		echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; fi; rm -rf $$tmp

modules: ## Rebuild modules/builds/{go,rust}/*.wasm (reproducible: same Go and rustc, same bytes) and their SHA256SUMS.
	@set -e; for m in $(MODULES); do \
		echo "module $$m (go)"; $(GO) run ./cmd/wasp module build modules/$$m -o modules/builds/go/$$m.wasm; \
		echo "module $$m (rust)"; $(GO) run ./internal/rustbuild/rustmodule -o modules/builds/rust/$$m.wasm modules/$$m; \
	done; for b in go rust; do (cd modules/builds/$$b && sha256sum $(MODULES:=.wasm) > SHA256SUMS); done

modules-check: modules ## Fail if the committed modules drift from their sources.
	@git diff --exit-code --stat -- modules/builds || \
		{ echo "modules/builds/*/*.wasm differ from their sources: run make modules and commit"; exit 1; }

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./abi/ ./host/pipeline/ ./host/reference/

clean:
	rm -rf bin
