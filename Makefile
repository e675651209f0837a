# crust developer entry points. `make run` and `make test` install what they need first.
CARGO ?= cargo
ARGS ?=

.PHONY: all build run test unit integration lint bench bench-images critest clean

all: build

build:
	$(CARGO) build --release --bins

## Start crust with its embedded default configuration (as root).
run:
	hack/install-deps.sh run
	hack/install-cni-config.sh
	$(CARGO) build --release --bins
	./target/release/crust serve $(ARGS)

## Every test: unit, integration (real daemon, namespaces, CNI, registry), and critest's specs
## for what crust implements when critest is on PATH.
test:
	hack/install-deps.sh test
	$(CARGO) build --bins
	$(CARGO) test --no-fail-fast -- --test-threads=2
	hack/critest.sh

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

## Latency and memory benchmarks against crust and, where installed, containerd: pod
## sandboxes, then images.
bench:
	hack/install-deps.sh bench
	$(CARGO) build --release --bins
	hack/bench.sh
	hack/bench-images.sh

critest:
	$(CARGO) build --bins
	hack/critest.sh

## Image pull/list/status benchmark against crust and, where installed, containerd.
bench-images:
	hack/install-deps.sh bench
	$(CARGO) build --release --bins
	hack/bench-images.sh

clean:
	$(CARGO) clean
