//go:build tools

// Package tools pins the command hack/build-tools.sh builds, so go.mod and go.sum hold its
// exact dependencies.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
