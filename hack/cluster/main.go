// Command cluster brings up, inspects and takes down crust's test cluster: a control-plane
// node and worker nodes on one machine, each node a network namespace with its own crust,
// kubelet and kube-proxy (docs/cluster.md). hack/cluster.sh builds it and passes the binaries'
// directories.
//
//	cluster [flags] up|down|status|smoke|e2e|life
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "enter" {
		err := enter(os.Args[2:])
		fmt.Fprintln(os.Stderr, "cluster enter:", err)
		os.Exit(127)
	}
	if err := cli(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster: FAILED:", err)
		os.Exit(1)
	}
}

func cli(args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	name := fs.String("name", "local", "the cluster's name (1 to 6 of a-z0-9)")
	workers := fs.Int("workers", 2, "worker nodes besides the control-plane node")
	subnet := fs.String("node-subnet", "172.30.40.0/24", "the nodes' /24 on the host bridge (one per cluster)")
	tools := fs.String("tools", "", "directory of the Kubernetes binaries and etcd (hack/build-tools.sh cluster)")
	coredns := fs.String("coredns", "", "directory of coredns (hack/build-tools.sh coredns); none: no DNS")
	crust := fs.String("crust", "", "the crust binary")
	runtime := fs.String("runtime", "crust", "the nodes' CRI runtime: crust, or containerd (the peer, to compare with)")
	containerd := fs.String("containerd", "", "directory of containerd and its shim (hack/build-tools.sh containerd), for --runtime containerd")
	controlPlane := fs.String("control-plane", "static", "up: the control plane as static pods of node-0 (static) or host processes in node-0's network namespace (host)")
	retain := fs.Bool("retain", false, "up: leave a cluster that failed to come up as it is (for its logs)")
	focus := fs.String("focus", `\[Conformance\]`, "e2e: the specs to run (ginkgo --focus)")
	skip := fs.String("skip", "", "e2e: specs not to run (ginkgo --skip)")
	skipsFile := fs.String("skips", "", "e2e: the skip list (`<regex> | <reason>` lines; e2e-cluster-config/skips.txt)")
	procs := fs.Int("procs", 2, "e2e: ginkgo processes")
	suiteTimeout := fs.Duration("suite-timeout", 3*time.Hour, "e2e: ginkgo's timeout")
	reportDir := fs.String("report-dir", "", "e2e: where the report and logs go (default /var/lib/crust-cluster-reports/<name>)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: cluster [flags] up|down|status|smoke|e2e|life")
		fs.PrintDefaults()
	}
	var err error
	if err = fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("one command: up, down, status, smoke, e2e or life")
	}
	c := DefaultCluster(*name)
	c.Workers = *workers
	c.Runtime = *runtime
	if fs.Arg(0) != "up" {
		// The runtime the cluster was brought up with.
		if b, err := os.ReadFile(c.RuntimeFile()); err == nil {
			c.Runtime = strings.TrimSpace(string(b))
		}
	}
	if c.NodeSubnet, err = netip.ParsePrefix(*subnet); err != nil {
		return fmt.Errorf("--node-subnet: %w", err)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	b := Binaries{ToolsDir: *tools, CoreDNSDir: *coredns, CrustSource: *crust, ContainerdDir: *containerd}
	k := Kube{Kubectl: b.Path("kubectl"), Kubeconfig: c.Kubeconfig()}
	cmd := fs.Arg(0)
	if cmd == "up" || cmd == "down" {
		unlock, err := lock(&c)
		if err != nil {
			return err
		}
		defer unlock()
	}
	switch cmd {
	case "up":
		if *tools == "" || (c.Runtime == "crust" && *crust == "") || (c.Runtime == "containerd" && *containerd == "") {
			return errors.New("up needs --tools, and --crust or (with --runtime containerd) --containerd")
		}
		if *controlPlane != "static" && *controlPlane != "host" {
			return fmt.Errorf("--control-plane is static or host, not %q", *controlPlane)
		}
		u := &Up{C: &c, B: b, K: k, Out: os.Stdout, StaticControlPlane: *controlPlane == "static"}
		if err := u.Run(); err != nil {
			if *retain {
				return fmt.Errorf("%w\n(the cluster is left as it is: --retain; logs in %s)", err, c.LogDir())
			}
			fmt.Fprintf(os.Stderr, "cluster: up failed: %v\ncluster: taking the cluster down\n", err)
			if derr := Down(&c, os.Stdout); derr != nil {
				return fmt.Errorf("%w\n(and down: %v)", err, derr)
			}
			return err
		}
		fmt.Printf("cluster: %s is up: %d nodes; kubectl is %s\n", c.Name, c.Workers+1,
			filepath.Join(c.BaseDir, "kubectl"))
		fmt.Printf("KUBECONFIG=%s\n", c.Kubeconfig())
		return nil
	case "down":
		if err := Down(&c, os.Stdout); err != nil {
			return err
		}
		// The lock and the parent directories go too (the latter when no other cluster has
		// anything there).
		_ = os.Remove(lockPath(&c))
		_ = os.Remove(filepath.Dir(c.RunDir))
		_ = os.Remove(filepath.Dir(c.BaseDir))
		fmt.Printf("cluster: %s is down\n", c.Name)
		return nil
	case "status":
		return Status(&c, b, k, os.Stdout)
	case "smoke":
		return Smoke(&c, k, os.Stdout)
	case "life":
		return (&Life{C: &c, B: b, K: k, Out: os.Stdout}).Run()
	case "e2e":
		dir := *reportDir
		if dir == "" {
			dir = filepath.Join("/var/lib/crust-cluster-reports", c.Name)
		}
		skips, err := ReadSkips(*skipsFile)
		if err != nil {
			return err
		}
		return SuiteRun{Tools: *tools, Kubeconfig: c.Kubeconfig(), Workers: c.Workers,
			DNSDomain: c.DNSDomain, Focus: *focus, Skip: *skip, Skips: skips, Procs: *procs,
			Timeout: *suiteTimeout, ReportDir: dir}.Run(os.Stdout)
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// lock keeps two harnesses from working on one cluster at once.
func lock(c *Cluster) (func(), error) {
	dir := filepath.Dir(c.RunDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath(c), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another hack/cluster.sh works on cluster %s (%s)", c.Name, f.Name())
	}
	return func() { f.Close() }, nil
}

func lockPath(c *Cluster) string { return filepath.Join(filepath.Dir(c.RunDir), "."+c.Name+".lock") }
