# Reel's build, test and lint targets. Plain Go tooling only; see README.md.

GO        ?= go
BIN       := bin
# How long each fuzz target runs under `make fuzz`, and each benchmark under `make bench`.
FUZZTIME  ?= 10s
BENCHTIME ?= 200ms
# Per test binary; the CI machine has 2 cores and 90 minutes in all.
TESTTIMEOUT ?= 15m
# Arguments for `make run`, e.g. make run ARGS='--model testdata/dory/dory-tiny-per_loop'.
ARGS ?=

# Go files to format-check: all but test data, hidden folders (.git, caches) and shared/.
GOFILES = $(shell find . -name '*.go' -not -path '*/testdata/*' -not -path './.*' -not -path './shared/*' -not -path './$(BIN)/*')

.PHONY: run build test lint bench fuzz cuda-test clean

# Generates text with the embedded default model (or ARGS' --model) on the CPU.
run: build
	./$(BIN)/reel run $(ARGS)

build:
	$(GO) build -o $(BIN)/reel ./cmd/reel

test:
	$(GO) test -timeout $(TESTTIMEOUT) ./...

lint:
	@unformatted="$$(gofmt -l $(GOFILES))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout $(TESTTIMEOUT) ./...

# Runs every Fuzz target of every package for FUZZTIME each (go test -fuzz
# takes one target at a time). Failing inputs land in the package's
# testdata/fuzz/ folder, where plain `go test` replays them.
fuzz:
	@set -e; \
	for dir in $$(grep -rl --include='*_test.go' -e '^func Fuzz' . | grep -v '/testdata/' | xargs -r -n1 dirname | sort -u); do \
		for target in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | cut -c6- | sort -u); do \
			echo "== $$dir $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done

# Test binaries to carry to a machine with an NVIDIA card: one per package
# with tests under ops/cuda and models, named after the package path
# (bin/ops_cuda.test, bin/models_dory.test, ...), plus bin/reel. Run each from
# its package folder in a checkout, as README.md says.
cuda-test: build
	@set -e; \
	for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./ops/cuda/... ./models/... ./trace/... 2>/dev/null); do \
		rel=$${pkg#$$($(GO) list -m)/}; \
		out=$(BIN)/$$(echo $$rel | tr / _).test; \
		echo "$(GO) test -c -o $$out $$pkg"; \
		$(GO) test -c -o $$out $$pkg; \
	done

clean:
	rm -rf $(BIN)
