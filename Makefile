# crust developer entry points. Each target installs what it needs first: Debian packages
# (hack/install-deps.sh, as root) and the Go-built clients and peers (hack/build-tools.sh: crictl,
# critest, kubelet, containerd from the modules pinned under hack/tools, cached by version in
# $(CRUST_TOOLS_CACHE)).
CARGO ?= cargo
ARGS ?=
# Seconds each fuzz target runs in `make test` (hack/fuzz.sh; run it longer by hand).
FUZZ_SECS ?= 10
export CRUST_TOOLS_CACHE ?= /var/cache/crust-tools
# Where crictl and critest are (built by the `tools` prerequisite below).
CRI_TOOLS = $(shell hack/build-tools.sh --dir cri-tools)

.PHONY: all build run test test-stress soak cgroupv2-test lint bench bench-images bench-kubelet critest e2e-node \
	e2e-cluster tools kubelet containerd deb clean

all: build

build:
	hack/install-deps.sh build
	$(CARGO) build --release --bins

## Start crust with its embedded default configuration (as root).
run:
	hack/install-deps.sh run
	hack/install-cni-config.sh
	$(CARGO) build --release --bins
	./target/release/crust serve $(ARGS)

## Every test: unit, integration (real daemon, namespaces, CNI, registry; the previous release's
## crust for the upgrade test, built once per machine by hack/build-previous.sh; the fuzz targets build
## beside them at the lowest priority, hack/beside-fuzz-build.sh), every fuzz target for
## $(FUZZ_SECS) seconds, then the whole critest
## suite against a crust of its own (hack/critest.sh; critest-config/skips.txt lists the gaps),
## then the whole suite again with every pod under the runtime handler `runc` (Debian's runc
## binary, [runtimes.runc]), then the cgroup tests again on pure cgroup v2 in a VM, with either
## driver: the quick set, what only cgroup v2 or the guest has (hack/cgroupv2-tests.sh; all of
## them: make cgroupv2-test).
test:
	hack/install-deps.sh test
	hack/build-tools.sh cri-tools kubelet runsc
	hack/build-previous.sh >/dev/null
	$(CARGO) build --bins
	PATH="$(CRI_TOOLS):$$PATH" hack/beside-fuzz-build.sh $(CARGO) test --no-fail-fast -- --test-threads=2
	hack/fuzz.sh $(FUZZ_SECS)
	PATH="$(CRI_TOOLS):$$PATH" hack/critest.sh
	PATH="$(CRI_TOOLS):$$PATH" CRITEST_RUNTIME=runc=/usr/sbin/runc hack/critest.sh
	CGROUPV2_SET=quick hack/cgroupv2-tests.sh

## The integration tests and critest STRESS_ROUNDS times (5) with the page cache dropped and two
## busy loops beside each round; prints every test that failed in any round (hack/test-stress.sh).
test-stress:
	hack/install-deps.sh test
	hack/build-tools.sh cri-tools kubelet runsc
	hack/build-previous.sh >/dev/null
	$(CARGO) build --bins
	PATH="$(CRI_TOOLS):$$PATH" hack/test-stress.sh $(STRESS_ROUNDS)

## Every cgroup test, in the cgroup v2 guest (cgroupfs driver, then systemd as PID 1 with the
## systemd driver; about 20 minutes, make test runs a quick set of them); CGROUPV2=cgroupfs or
## systemd runs one of the two. Run it before resolving an issue that changes pods or containers.
cgroupv2-test:
	hack/install-deps.sh test
	$(CARGO) build --bins
	hack/cgroupv2-tests.sh $(CGROUPV2)

## Churn by hand: pods with a running container created and removed by CRUST_SOAK_CLIENTS
## clients (4) for CRUST_SOAK_SECS seconds (600) after CRUST_SOAK_WARMUP_SECS (120) of warm-up,
## checking for leaks every minute and printing the daemon's RSS and descriptors; RSS must stay
## within 10% of the warmed-up daemon's (tests/churn.rs, the ignored `soak` test). Then months
## of traffic (tests/traffic.rs, tests/kubelet_restart.rs, which make test runs small): 10000
## ExecSync, 2000 streamed execs and attaches, 1000 log rotations under a fast writer, kubelet
## restarted 10 times while 30 pods start; nothing may be lost or leaked.
soak:
	hack/install-deps.sh test
	hack/build-tools.sh cri-tools kubelet
	$(CARGO) build --bins
	$(CARGO) test --test churn -- --ignored --nocapture soak
	CRUST_SOAK_EXECS=$${CRUST_SOAK_EXECS:-10000} CRUST_SOAK_STREAMS=$${CRUST_SOAK_STREAMS:-2000} \
	  CRUST_SOAK_ROTATIONS=$${CRUST_SOAK_ROTATIONS:-1000} CRUST_SOAK_KUBELET_RESTARTS=$${CRUST_SOAK_KUBELET_RESTARTS:-10} \
	  PATH="$(CRI_TOOLS):$$PATH" $(CARGO) test --test traffic --test kubelet_restart -- --nocapture --test-threads=1

## The whole critest suite alone.
critest:
	hack/install-deps.sh test
	hack/build-tools.sh cri-tools kubelet
	$(CARGO) build --bins
	PATH="$(CRI_TOOLS):$$PATH" hack/critest.sh

## Kubernetes' node conformance suite (test/e2e_node: [NodeConformance] without [Flaky], [Slow],
## [Serial]; 8 ginkgo processes) against a crust of its own, offline (hack/e2e-node.sh;
## e2e-node-config/skips.txt lists the gaps). Too long for make test. E2E_RUNTIME=containerd
## runs it against containerd 2.4.2 instead; ARGS='--focus=Probing' narrows it (ARGS is split
## into words by the shell: quote a regex with | inside, ARGS="'--focus=Probing|Lifecycle'").
## E2E_FOCUS=features runs the wider selection containerd gates its pull requests on
## ([NodeConformance], [Feature:*] and [Feature] without its skips; 535 specs in v1.37.2),
## with e2e-node-config/features-skips.txt besides.
e2e-node:
	hack/install-deps.sh test
	hack/build-tools.sh cri-tools e2e-node
	$(CARGO) build --bins
	hack/e2e-node.sh $(ARGS)

## Kubernetes' conformance suite (test/e2e) on a cluster whose nodes run crust: a control-plane
## node and two workers on this machine, each a network namespace with its own crust, kubelet and
## kube-proxy (hack/e2e-cluster.sh, docs/cluster.md): the cluster up, its smoke test, e2e.test
## with E2E_CLUSTER_FOCUS (default every [Conformance] spec, 462 in v1.37.2, [Serial] last) and
## e2e-cluster-config/skips.txt, the cluster-life test, the cluster down; prints
## `e2e-cluster: N passed, N failed, N skipped`. Too long for make test (about 45 min warm).
## E2E_RUNTIME=containerd runs the same on containerd 2.4.2 nodes; ARGS passes flags to the
## harness (split into words by the shell, as e2e-node's); hack/cluster.sh
## up|down|status|smoke|e2e|life by hand.
E2E_CLUSTER_FOCUS ?= \[Conformance\]
E2E_CLUSTER_PROCS ?= 3
e2e-cluster:
	hack/install-deps.sh test
	hack/build-tools.sh cluster coredns
	$(CARGO) build --release --bins
	hack/e2e-cluster.sh --focus='$(E2E_CLUSTER_FOCUS)' --procs=$(E2E_CLUSTER_PROCS) $(ARGS)

lint:
	hack/install-deps.sh build
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

## Latency and memory benchmarks against crust and containerd (2.x built from its Go module;
## Debian's 1.6 if that build fails): pod sandboxes, then images; then the statistics budget
## (crust alone).
bench:
	hack/install-deps.sh bench
	$(CARGO) build --release --bins
	hack/bench.sh
	hack/bench-images.sh
	hack/bench-stats.sh
	hack/bench-kubelet.sh

## Pod start as kubelet measures it (kubelet v1.37, 30 static pods of an init and a main
## container) on crust, then on containerd, in the same run.
bench-kubelet:
	hack/install-deps.sh bench
	$(CARGO) build --release --bins
	hack/bench-kubelet.sh

## Image pull/list/status benchmark against crust and containerd.
bench-images:
	hack/install-deps.sh bench
	$(CARGO) build --release --bins
	hack/bench-images.sh

## The Debian package, target/deb/crust_<version>_amd64.deb (hack/deb.sh): the release binary,
## its systemd unit, the default configuration as a conffile. DEB_VERSION overrides Cargo.toml's
## version (an upgrade test builds a second, higher one).
deb:
	hack/install-deps.sh build
	$(CARGO) build --release --bins
	hack/deb.sh $(if $(DEB_VERSION),--version $(DEB_VERSION))

## The Go-built tools, each into the cache (reused while go.mod and go.sum are unchanged).
tools:
	hack/build-tools.sh cri-tools
kubelet:
	hack/build-tools.sh kubelet
containerd:
	hack/build-tools.sh containerd

clean:
	$(CARGO) clean
