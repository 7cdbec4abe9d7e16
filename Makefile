# lmos-hub — GNU make targets for building and testing.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BENCH    ?= .
FUZZTIME ?= 30s
BIN      := bin/lmos-hub
LDFLAGS  := -s -w -X main.version=$(VERSION)

.DEFAULT_GOAL := build

.PHONY: build test test-short test-deps bench vet fmt-check fuzz clean distclean

## build: static binary bin/lmos-hub
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/lmos-hub

## test-deps: install what the tests need (Debian packages such as node/npm and
## chromium, and test/interop/node_modules with playwright-core)
test-deps:
	bash scripts/test-deps.sh

## test: full suite; LMOS_INTEROP=1 makes interop tests run instead of skipping
test: test-deps
	LMOS_INTEROP=1 $(GO) test -count=1 -timeout 14m ./...

## test-short: quick tests only, no test dependencies needed
test-short:
	$(GO) test -short ./...

## bench: benchmarks matching BENCH (default: all; BenchmarkSteadyIdleRSS alone
## idles 190 s, LMOS_BENCH_IDLE_SECS sets its window; BenchmarkDashboardWatch
## watches 10 min, LMOS_BENCH_DASH_SECS)
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -timeout 60m ./...

## vet: gofmt check and go vet, here and for the gateways' 64- and 32-bit ARM
## (a constant that overflows a 32-bit int only shows there)
vet: fmt-check
	$(GO) vet ./...
	GOOS=linux GOARCH=arm64 $(GO) vet ./...
	GOOS=linux GOARCH=arm GOARM=7 $(GO) vet ./...

fmt-check:
	@dirs=$$($(GO) list -f '{{.Dir}}' ./...) || exit 1; \
	[ -n "$$dirs" ] || exit 0; \
	unformatted=$$(gofmt -l $$dirs) || exit 1; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi

## fuzz: run every Fuzz* test, one at a time, for FUZZTIME each
fuzz:
	@set -e; \
	for pkg in $$($(GO) list ./...); do \
		list=$$($(GO) test -list '^Fuzz' $$pkg) || { echo "$$list"; exit 1; }; \
		for f in $$(echo "$$list" | grep '^Fuzz' || true); do \
			echo "== fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

## clean: remove build output
clean:
	rm -rf bin

## distclean: also remove installed test dependencies
distclean: clean
	rm -rf test/interop/node_modules
