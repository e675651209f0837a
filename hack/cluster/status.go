package main

// `status`: what of the cluster is on the machine and running, found by name.

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Status prints the cluster's parts; it fails unless every part is up.
func Status(c *Cluster, b Binaries, k Kube, out io.Writer) error {
	var problems []string
	nss, _ := clusterNetns(c)
	if len(nss) == 0 && !cgroupExists(c.CgroupBase()) {
		fmt.Fprintf(out, "cluster %s: not up\n", c.Name)
		return fmt.Errorf("cluster %s is not up", c.Name)
	}
	procs := ControlPlane(c, b)
	for _, n := range c.Nodes() {
		crust, kubelet, proxy := NodeProcs(n, b)
		procs = append(procs, crust, kubelet, proxy)
	}
	for _, n := range c.Nodes() {
		var parts []string
		if _, err := os.Stat(n.NetnsPath()); err != nil {
			problems = append(problems, n.Netns()+" missing")
			parts = append(parts, "no network namespace")
		}
		for _, p := range procs {
			if p.Node.Name != n.Name {
				continue
			}
			state := "running"
			if !p.Running() {
				state = "NOT running"
				problems = append(problems, p.Name+" of "+n.Name+" not running")
			}
			parts = append(parts, p.Name+" "+state)
		}
		fmt.Fprintf(out, "%s (%s, %s): %s\n", n.Name, n.IP, n.Netns(), strings.Join(parts, ", "))
	}
	if nodes, err := k.Run("get", "nodes", "-o", "wide"); err == nil {
		fmt.Fprint(out, nodes)
	} else {
		problems = append(problems, "the API server does not answer: "+err.Error())
	}
	fmt.Fprintf(out, "KUBECONFIG=%s\n", c.Kubeconfig())
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}
