// seccomp-default prints containerd's RuntimeDefault seccomp profile, from contrib/seccomp of
// the containerd module this directory's go.mod pins (the one make bench and the differential
// tests run), for the capability sets given: one argument per set, capability names separated
// by commas ("" for none), as the container's bounding set. It prints one JSON array holding
// the profile (an OCI linux.seccomp object, exactly as containerd hands it to runc) of each
// set, in order.
//
// tests/seccomp_default.rs compares crust's profile with these, rule by rule, for every
// capability set that changes it, so a change in containerd's profile fails that test.
//
//	go run ./seccomp-default "" CAP_SYS_ADMIN CAP_SYS_PTRACE,CAP_SYS_NICE
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func main() {
	var out []*specs.LinuxSeccomp
	for _, set := range os.Args[1:] {
		var caps []string
		for _, c := range strings.Split(set, ",") {
			if c != "" {
				caps = append(caps, c)
			}
		}
		spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
			Bounding: caps, Effective: caps, Permitted: caps,
		}}}
		out = append(out, seccomp.DefaultProfile(spec))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "seccomp-default:", err)
		os.Exit(1)
	}
}
