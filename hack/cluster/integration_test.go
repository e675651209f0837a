package main

// Root-only tests of the machine-facing parts (network namespaces, bridge, cgroups, processes,
// down), without Kubernetes: CLUSTER_INTEGRATION=1 go test -run Integration (as root).

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// Proc.Start runs the test binary as `enter`, as it runs the harness.
	if len(os.Args) > 1 && os.Args[1] == "enter" {
		err := enter(os.Args[2:])
		fmt.Fprintln(os.Stderr, "enter:", err)
		os.Exit(127)
	}
	os.Exit(m.Run())
}

func integration(t *testing.T) *Cluster {
	t.Helper()
	if os.Getenv("CLUSTER_INTEGRATION") != "1" {
		t.Skip("CLUSTER_INTEGRATION=1 runs it (as root)")
	}
	c := DefaultCluster("itest")
	c.NodeSubnet = mustPrefix("172.30.41.0/24")
	if left := leftovers(&c); len(left) > 0 {
		t.Fatalf("left from before: %v", left)
	}
	t.Cleanup(func() {
		if err := Down(&c, os.Stdout); err != nil {
			t.Errorf("down: %v", err)
		}
		if left := leftovers(&c); len(left) > 0 {
			t.Errorf("left after down: %v", left)
		}
		_ = os.Remove("/var/lib/crust-cluster")
		_ = os.Remove("/run/crust-cluster")
	})
	return &c
}

func TestIntegrationNodesProcessesDown(t *testing.T) {
	c := integration(t)
	if err := SetupHost(c); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if err := SetupNode(n); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2 := c.Node(1), c.Node(2)
	// node to node over the bridge
	if _, err := runIn(n1, "ping", "-c1", "-W2", n2.IP.String()); err != nil {
		t.Fatal(err)
	}
	// the registry's port at the bridge's address reaches the host's loopback
	srv := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", c.RegistryPort)}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v2/", c.RegistryPort)); err == nil {
		resp.Body.Close() // a registry runs already: use it
	} else {
		srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") })
		go srv.ListenAndServe()
		defer srv.Close()
	}
	err := waitFor("the registry from node-1", 10*time.Second, func() (bool, string, error) {
		code, body, err := getIn(n1, c.RegistryURL()+"/v2/")
		if err != nil {
			return false, err.Error(), nil
		}
		return code == 200, body, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// a process in the node's network namespace and cgroup, in the host's mount namespace
	if err := os.MkdirAll(c.LogDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	p := NodeProc(n1, "sleeper", "/usr/bin/sleep", "600")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	err = waitFor("sleeper running", 10*time.Second, func() (bool, string, error) {
		pids, _ := cgroupPids(p.Cgroup)
		for _, x := range pids {
			pid = x
		}
		return p.Running(), fmt.Sprint(pids), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.LogTail(10))
	}
	want, _ := os.Readlink("/proc/self/ns/mnt")
	if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); got != want {
		t.Errorf("mount namespace %s, want the host's %s", got, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(n1.NetnsPath(), &st); err != nil {
		t.Fatal(err)
	}
	if got, want := readlink(fmt.Sprintf("/proc/%d/ns/net", pid)), fmt.Sprintf("net:[%d]", st.Ino); got != want {
		t.Errorf("net namespace %s, want node-1's %s", got, want)
	}
	// down, from nothing but the name (the cleanup): the process ends, everything goes
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func readlink(p string) string { s, _ := os.Readlink(p); return s }
