//go:build tools

// Package tools pins the commands hack/build-tools.sh builds, so go.mod and go.sum hold
// their exact dependencies.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/critest"
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
