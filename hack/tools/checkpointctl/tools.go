//go:build tools

// Keeps checkpointctl's main package (and so its dependencies) in this module's go.sum.
package tools

import _ "github.com/checkpoint-restore/checkpointctl"
