# lmos-hub — GNU make targets for building and testing.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BENCH    ?= .
FUZZTIME ?= 30s
BIN      := bin/lmos-hub
LDFLAGS  := -s -w -X main.version=$(VERSION)

.DEFAULT_GOAL := build

.PHONY: build dist deb help test test-short test-deps bench vet fmt-check fuzz clean distclean FORCE

## build: static binary bin/lmos-hub
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/lmos-hub

# Cross builds: one static binary per gateway architecture. armv6 is
# GOARM=6 (Pi Zero/1, and Raspberry Pi OS 32-bit on any Pi), armv7 GOARM=7
# (32-bit ARMv7 Debian/Ubuntu armhf boards; dies on a Pi Zero/1).
DIST       ?= dist
DIST_ARCH  := amd64 arm64 armv6 armv7
dist_env    = $(if $(filter armv%,$1),GOARCH=arm GOARM=$(patsubst armv%,%,$1),GOARCH=$1)
NFPM       ?= $(CURDIR)/.cache/bin/nfpm

## dist: static, stripped binaries dist/lmos-hub-linux-ARCH for amd64, arm64,
## armv6 (GOARM=6) and armv7 (GOARM=7); DIST=dir builds elsewhere
dist: $(DIST_ARCH:%=$(DIST)/lmos-hub-linux-%)

$(DIST)/lmos-hub-linux-%: FORCE
	CGO_ENABLED=0 GOOS=linux $(call dist_env,$*) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $@ ./cmd/lmos-hub

## deb: dist, then a .deb per architecture beside the binaries (nfpm,
## packaging/nfpm.yaml; docs/OPERATIONS.md says which one a Pi needs)
deb: dist
	@test -x $(NFPM) || bash scripts/test-deps.sh
	@set -e; for a in $(DIST_ARCH); do \
		VERSION=$(VERSION) DIST=$(abspath $(DIST)) bash packaging/deb.sh $(NFPM) $$a; \
	done

## help: list the targets
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); printf "  %s\n", $$0; next } /^## / { sub(/^## /, ""); printf "      %s\n", $$0 }' $(MAKEFILE_LIST)

FORCE:

## test-deps: install what the tests need (Debian packages such as node/npm and
## chromium, and test/interop/node_modules with playwright-core)
test-deps:
	bash scripts/test-deps.sh

## test: full suite; LMOS_INTEROP=1 makes interop tests run instead of skipping
test: test-deps
	LMOS_INTEROP=1 $(GO) test -count=1 -timeout 14m ./...
	$(GO) test -count=1 -tags otel -run 'Tracing' ./test/e2e

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

## fmt-check: list the files gofmt would change (part of vet)
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
	rm -rf bin dist

## distclean: also remove installed test dependencies
distclean: clean
	rm -rf test/interop/node_modules .cache
