//go:build tools

// Package tools pins the commands hack/build-tools.sh builds for make e2e-node, so go.mod and
// go.sum hold their exact dependencies (the test-only imports of test/e2e_node too: go mod tidy
// alone would drop them, so this module was completed by `go test -c` of that package).
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e_node"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
