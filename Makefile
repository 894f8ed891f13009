# twinmq make targets. `make test` is what CI runs (see .ci/run).
SHELL     := bash
.SHELLFLAGS := -o pipefail -c
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 2s

.PHONY: all test vet race fmt-check example bench-store bench-wire bench-produce bench-consume bench-delay proto interop fuzz

all: test

# vet + the whole suite with the race detector. This is the README's test command.
test: vet
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# The main job: a producer against the embedded two-cluster broker.
example:
	$(GO) run ./examples/producer

# Storage-core benchmarks; ends with one FIGURE line per figure.
bench-store:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./internal/store/ | $(GO) run ./internal/benchfig

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 30s ./internal/store/
	$(GO) test -run '^$$' -fuzz FuzzDecodeCQEntry -fuzztime 30s ./internal/store/
