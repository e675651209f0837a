package main

// The cluster's network: a bridge on the host (crust-<cluster>, the node subnet's .1), each
// node a network namespace (crust-<cluster>-node-<i>) joined to it by a veth (host end
// crust-<cluster>-n<i>, node end eth0), and routes to every node's pod CIDR through that node
// (as kind's kindnet adds them). The host forwards the bridge address's registry port to the
// offline registry on its loopback (a DNAT in the chain CRUST-<CLUSTER>, with route_localnet on
// the bridge alone). Everything here is named after the cluster, so `down` finds it by name.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// iptables rules of the host, each in the cluster's chain, jumped to from the built-in chain.
type hostChain struct{ table, builtin string }

var hostChains = []hostChain{{"nat", "PREROUTING"}, {"filter", "FORWARD"}}

// SetupHost makes the bridge and the host's rules.
func SetupHost(c *Cluster) error {
	br := c.Bridge()
	steps := [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", c.BridgeIP(), c.NodeSubnet.Bits()), "dev", br},
		{"ip", "link", "set", br, "up"},
		{"sysctl", "-qw", "net.ipv4.conf." + br + ".route_localnet=1"},
	}
	for _, hc := range hostChains {
		steps = append(steps, []string{"iptables", "-w", "-t", hc.table, "-N", c.Chain()},
			[]string{"iptables", "-w", "-t", hc.table, "-I", hc.builtin, "-m", "comment",
				"--comment", "crust cluster " + c.Name, "-j", c.Chain()})
	}
	steps = append(steps,
		// The nodes reach the offline registry at the bridge's address.
		[]string{"iptables", "-w", "-t", "nat", "-A", c.Chain(), "-i", br, "-d", c.BridgeIP().String(),
			"-p", "tcp", "--dport", fmt.Sprint(c.RegistryPort), "-j", "DNAT",
			"--to-destination", fmt.Sprintf("127.0.0.1:%d", c.RegistryPort)},
		// Frames between nodes cross the host's FORWARD chain (bridge-nf-call-iptables): let
		// them through whatever its policy.
		[]string{"iptables", "-w", "-t", "filter", "-A", c.Chain(), "-i", br, "-o", br, "-j", "ACCEPT"})
	for _, s := range steps {
		if _, err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// SetupNode makes the node's network namespace, its link to the bridge and its settings.
func SetupNode(n *Node) error {
	c := n.C
	ns := n.Netns()
	host := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", n.HostVeth(), "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", n.HostVeth(), "master", c.Bridge(), "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", fmt.Sprintf("%s/%d", n.IP, c.NodeSubnet.Bits()), "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", c.BridgeIP().String()},
	}
	for _, s := range host {
		if _, err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	// A new namespace forwards nothing, and its bridge's frames skip iptables (kube-proxy's
	// rules must see pod-to-Service traffic on the node's pod bridge).
	for _, kv := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
		if _, err := runIn(n, "sysctl", "-qw", kv); err != nil {
			return err
		}
	}
	if c.Runtime == "containerd" {
		// What crust's masquerade_subnets does on a crust node (kindnet's rule): pods' traffic
		// leaving the cluster CIDR goes out with the node's address.
		pod := c.PodCIDR.String()
		if _, err := runIn(n, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", pod, "!", "-d", pod,
			"-j", "MASQUERADE"); err != nil {
			return err
		}
	}
	return nil
}

// RoutePodCIDRs routes every other node's pod CIDR through that node, in each node's namespace.
func RoutePodCIDRs(nodes []*Node, cidrs map[string]string) error {
	for _, n := range nodes {
		for _, peer := range nodes {
			if peer == n {
				continue
			}
			cidr, ok := cidrs[peer.Name]
			if !ok {
				return fmt.Errorf("%s has no pod CIDR", peer.Name)
			}
			if _, err := run("ip", "-n", n.Netns(), "route", "replace", cidr, "via", peer.IP.String()); err != nil {
				return err
			}
		}
	}
	return nil
}

// clusterNetns lists the cluster's node namespaces that exist.
func clusterNetns(c *Cluster) ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), c.NetnsPrefix()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// clusterLinks lists the host's links named after the cluster (the bridge, veth ends).
func clusterLinks(c *Cluster) ([]string, error) {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Name() == c.Bridge() || strings.HasPrefix(e.Name(), c.Bridge()+"-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// hostRules lists the iptables lines of the host that name the cluster's chain.
func hostRules(c *Cluster) []string {
	var out []string
	for _, hc := range hostChains {
		s, _ := run("iptables", "-w", "-t", hc.table, "-S")
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, " "+c.Chain()) || strings.HasSuffix(l, c.Chain()) {
				out = append(out, hc.table+": "+l)
			}
		}
	}
	return out
}

// TeardownNetwork removes the namespaces, links and host rules of the cluster; the namespaces'
// own rules and routes go with them.
func TeardownNetwork(c *Cluster) error {
	var errs []error
	nss, err := clusterNetns(c)
	errs = append(errs, err)
	for _, ns := range nss {
		if _, err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	links, err := clusterLinks(c)
	errs = append(errs, err)
	for _, l := range links {
		if _, err := run("ip", "link", "del", l); err != nil && linkExists(l) {
			errs = append(errs, err)
		}
	}
	for _, hc := range hostChains {
		for {
			// every jump to the chain (there is one unless `up` was interrupted twice)
			if _, err := run("iptables", "-w", "-t", hc.table, "-D", hc.builtin, "-m", "comment",
				"--comment", "crust cluster "+c.Name, "-j", c.Chain()); err != nil {
				break
			}
		}
		if _, err := run("iptables", "-w", "-t", hc.table, "-F", c.Chain()); err == nil {
			if _, err := run("iptables", "-w", "-t", hc.table, "-X", c.Chain()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// subnetFree fails when an address of the host is in the cluster's node subnet (another
// cluster's bridge, most likely: give this one another --node-subnet).
func subnetFree(c *Cluster) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && c.NodeSubnet.Contains(ip.Unmap()) {
					return fmt.Errorf("%s has %s, in the node subnet %s (another cluster's? --node-subnet)", ifc.Name, ipn, c.NodeSubnet)
				}
			}
		}
	}
	return nil
}
