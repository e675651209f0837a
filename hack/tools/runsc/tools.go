//go:build tools

// Keeps runsc's main package (and so its dependencies) in this module's go.sum.
package tools

import _ "gvisor.dev/gvisor/runsc"
