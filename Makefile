# sipvisor build, test and benchmark targets.
GO        ?= go
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/sipvisor/sipvisor/supervisor.Version=$(VERSION)
PKGS      := ./...
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test-door all build test test-short lint bench fuzz golden clean demo

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o bin/sipvisor ./cmd/sipvisor
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o bin/sipload ./cmd/sipload

# The test command README.md names and CI runs. The end-to-end tests are
# packages of their own under e2e/, by theme. They wait on processes and
# sockets far more than they compute (the whole run used under half of one
# core of a 2-core machine), so four packages run at once rather than one
# per core. The longest, e2e/load and e2e/lifecycle, take 2 to 2.5
# minutes; the whole run about 4 (236 s on a 2-core machine while other
# tests ran). The timeout applies to each package's test binary.
test:
	$(GO) test -race -count=1 -p 4 -timeout 480s $(PKGS)

# A quick loop: no race detector, and the end-to-end tests that run load,
# soaks, long holds or hundreds of SIPp calls skipped. It took 3.5 minutes
# on a 2-core machine busy with other work (load average over 10); the unit
# tests of supervisor and loadgen are a third of it.
test-short:
	$(GO) test -short -count=1 -timeout 120s $(PKGS)

# The end-to-end tests again with every datagram through the supervisor's
# front door (udp_direct_reads = no, unless a test's config says).
test-door:
	SIPVISOR_E2E_DIRECT_READS=no $(GO) test -race -count=1 -p 4 -timeout 480s ./e2e/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	@# Only pool/ starts processes (depguard-style fence, kept without a linter dependency);
	@# load generators, benchmarks, the helper that starts a test's redis-server and the
	@# end-to-end tests' harness are tools.
	@bad=$$(grep -l '"os/exec"' $$(git ls-files '*.go' | grep -v _test.go | grep -v '^pool/' | grep -v '^loadgen/' | grep -v '^bench/' | grep -v '^location/redistest/' | grep -v '^e2e/internal/harness/')); \
	  if [ -n "$$bad" ]; then echo "os/exec outside pool/: $$bad"; exit 1; fi

# Go benchmarks of the hot paths, with allocations.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s $(PKGS)

fuzz:
	$(GO) test ./config -run '^$$' -fuzz FuzzLoad -fuzztime 60s
	$(GO) test ./internal/sipscan -run '^$$' -fuzz FuzzScan -fuzztime 60s

# Rewrite the config golden files; review the diff like code.
golden:
	$(GO) test ./config -run TestGolden -update

# The OpenSIPS auto-scaling experiment on 127.0.0.1; about five minutes.
demo:
	examples/demo.sh

clean:
	rm -rf bin

# Side by side with Kamailio under SIPp (bench/, docs/PERFORMANCE.md).
# Pass flags through BENCH_FLAGS, e.g. BENCH_FLAGS='--rates 200 --reps 1'.
.PHONY: bench-install bench-compare bench-capacity bench-tls
BENCH_FLAGS ?=

bench-install:
	bash bench/install.sh

bench-compare:
	bash bench/run.sh $(BENCH_FLAGS)

bench-capacity:
	bash bench/capacity.sh $(BENCH_FLAGS)

bench-tls:
	bash bench/tls.sh $(BENCH_FLAGS)
