// runtime-defaults prints containerd's defaults for confining containers, from the containerd
// module this directory's go.mod pins (the one make bench and the differential tests run):
//
//	runtime-defaults seccomp SET...
//	    contrib/seccomp's RuntimeDefault profile for each capability set given: one argument
//	    per set, capability names separated by commas ("" for none), as the container's
//	    bounding set; one JSON array of the profiles (OCI linux.seccomp objects, exactly as
//	    containerd hands them to runc), in order
//	runtime-defaults apparmor NAME
//	    contrib/apparmor's default profile as containerd generates it on this host, named NAME
//
// tests/containerd_defaults.rs compares crust's with these, so a change in containerd's
// defaults fails that test rather than drifting.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/containerd/v2/contrib/apparmor"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: runtime-defaults seccomp SET... | apparmor NAME")
	}
	switch os.Args[1] {
	case "seccomp":
		seccompProfiles(os.Args[2:])
	case "apparmor":
		if len(os.Args) != 3 {
			fail("usage: runtime-defaults apparmor NAME")
		}
		text, err := apparmor.DumpDefaultProfile(os.Args[2])
		if err != nil {
			fail(err.Error())
		}
		fmt.Print(text)
	default:
		fail("unknown command " + os.Args[1])
	}
}

func seccompProfiles(sets []string) {
	var out []*specs.LinuxSeccomp
	for _, set := range sets {
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
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "runtime-defaults:", msg)
	os.Exit(1)
}
