//go:build tools

// Package tools pins the commands hack/build-tools.sh builds, so go.mod and go.sum hold their
// exact dependencies.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
