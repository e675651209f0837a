//go:build tools

// Package tools pins what hack/build-tools.sh builds for the test cluster (hack/cluster.sh,
// make e2e-cluster): the control plane, kube-proxy, kubelet and kubectl, the conformance suite
// (e2e.test), the ginkgo CLI that runs it and agnhost, its test image, all from one
// k8s.io/kubernetes, and etcd at the version that Kubernetes requires. go mod tidy drops the
// test-only imports of test/e2e, so go.sum was completed by `go test -c` of that package.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/sample-apiserver"
)
