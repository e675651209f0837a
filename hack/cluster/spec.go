package main

// The cluster's settings: one struct per cluster and one per node, every name, address and
// directory derived from the cluster's name and the node's index, so that `down` can find all
// of it again without a record of what `up` did.

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
)

// Cluster holds what a user may choose; everything else is derived from it.
type Cluster struct {
	Name         string       // [a-z0-9]{1,6}: it prefixes interface names (15 bytes at most)
	Workers      int          // worker nodes besides the control-plane node (1..9)
	NodeSubnet   netip.Prefix // the host bridge's /24: host .1, node i at .10+i
	PodCIDR      netip.Prefix // the cluster CIDR; each node gets a /24 of it from the controller manager
	ServiceCIDR  netip.Prefix // ClusterIPs: .1 the API server's Service, .10 the DNS Service
	DNSDomain    string
	RegistryPort int    // the offline registry on the host's loopback, reached through the bridge's address
	Runtime      string // every node's CRI runtime: crust, or containerd (the peer crust is compared with)
	BaseDir      string // persistent files: /var/lib/crust-cluster/<name>
	RunDir       string // files that die with the machine: /run/crust-cluster/<name>
}

// DefaultCluster is the cluster hack/cluster.sh brings up.
func DefaultCluster(name string) Cluster {
	return Cluster{
		Name:         name,
		Workers:      2,
		NodeSubnet:   netip.MustParsePrefix("172.30.40.0/24"),
		PodCIDR:      netip.MustParsePrefix("10.244.0.0/16"),
		ServiceCIDR:  netip.MustParsePrefix("10.96.0.0/16"),
		DNSDomain:    "cluster.local",
		RegistryPort: 5000,
		Runtime:      "crust",
		BaseDir:      filepath.Join("/var/lib/crust-cluster", name),
		RunDir:       filepath.Join("/run/crust-cluster", name),
	}
}

var clusterName = regexp.MustCompile(`^[a-z0-9]{1,6}$`)

// Validate refuses settings that would make names collide or overflow.
func (c *Cluster) Validate() error {
	if !clusterName.MatchString(c.Name) {
		return fmt.Errorf("cluster name %q: 1 to 6 lowercase letters or digits (it prefixes interface names)", c.Name)
	}
	if c.Workers < 1 || c.Workers > 9 {
		return fmt.Errorf("workers: 1 to 9, not %d", c.Workers)
	}
	for _, p := range []struct {
		name string
		p    netip.Prefix
		bits int
	}{{"node subnet", c.NodeSubnet, 24}, {"pod CIDR", c.PodCIDR, 16}, {"service CIDR", c.ServiceCIDR, 16}} {
		if !p.p.IsValid() || !p.p.Addr().Is4() || p.p.Bits() != p.bits || p.p.Masked() != p.p {
			return fmt.Errorf("%s %s: an IPv4 /%d network", p.name, p.p, p.bits)
		}
	}
	if c.PodCIDR.Overlaps(c.ServiceCIDR) || c.PodCIDR.Overlaps(c.NodeSubnet) || c.ServiceCIDR.Overlaps(c.NodeSubnet) {
		return fmt.Errorf("the node subnet, pod CIDR and service CIDR overlap")
	}
	if c.Runtime != "crust" && c.Runtime != "containerd" {
		return fmt.Errorf("runtime: crust or containerd, not %q", c.Runtime)
	}
	if !filepath.IsAbs(c.BaseDir) || !filepath.IsAbs(c.RunDir) {
		return fmt.Errorf("base and run directories must be absolute")
	}
	return nil
}

func nth(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Names and addresses of the cluster's host-side parts.
func (c *Cluster) Bridge() string              { return "crust-" + c.Name }
func (c *Cluster) BridgeIP() netip.Addr        { return nth(c.NodeSubnet, 1) }
func (c *Cluster) Chain() string               { return "CRUST-" + strings.ToUpper(c.Name) }
func (c *Cluster) CgroupBase() string          { return "/crust-" + c.Name }
func (c *Cluster) NetnsPrefix() string         { return "crust-" + c.Name + "-node-" }
func (c *Cluster) KubernetesSvcIP() netip.Addr { return nth(c.ServiceCIDR, 1) }
func (c *Cluster) DNSIP() netip.Addr           { return nth(c.ServiceCIDR, 10) }
func (c *Cluster) APIServerIP() netip.Addr     { return c.Node(0).IP }
func (c *Cluster) APIServerURL() string        { return fmt.Sprintf("https://%s:6443", c.APIServerIP()) }
func (c *Cluster) RegistryURL() string {
	return fmt.Sprintf("http://%s:%d", c.BridgeIP(), c.RegistryPort)
}

// MirroredRegistries are the registries the suite's images name, each pulled from the offline
// registry instead.
func (c *Cluster) MirroredRegistries() []string {
	return []string{"registry.k8s.io", "docker.io", "gcr.io"}
}
func (c *Cluster) PKIDir() string          { return filepath.Join(c.BaseDir, "pki") }
func (c *Cluster) Kubeconfig() string      { return filepath.Join(c.BaseDir, "kubeconfig") }
func (c *Cluster) RuntimeFile() string     { return filepath.Join(c.BaseDir, "runtime") }
func (c *Cluster) LogDir() string          { return filepath.Join(c.BaseDir, "logs") }
func (c *Cluster) EtcdDir() string         { return filepath.Join(c.BaseDir, "etcd") }
func (c *Cluster) ControlPlaneDir() string { return filepath.Join(c.BaseDir, "control-plane") }

// Nodes lists the control-plane node (index 0) and the workers.
func (c *Cluster) Nodes() []*Node {
	ns := make([]*Node, 0, c.Workers+1)
	for i := 0; i <= c.Workers; i++ {
		ns = append(ns, c.Node(i))
	}
	return ns
}

// Node is one node's handle: everything that is its own, by name.
type Node struct {
	C            *Cluster
	Index        int
	Name         string // the Kubernetes node name: node-<i>
	ControlPlane bool
	IP           netip.Addr
}

func (c *Cluster) Node(i int) *Node {
	return &Node{C: c, Index: i, Name: fmt.Sprintf("node-%d", i), ControlPlane: i == 0,
		IP: nth(c.NodeSubnet, 10+i)}
}

func (n *Node) Netns() string     { return n.C.NetnsPrefix() + fmt.Sprint(n.Index) }
func (n *Node) NetnsPath() string { return filepath.Join("/run/netns", n.Netns()) }

// HostVeth is the host end of the node's link to the bridge (the node's end is eth0).
func (n *Node) HostVeth() string { return fmt.Sprintf("crust-%s-n%d", n.C.Name, n.Index) }
func (n *Node) Dir() string      { return filepath.Join(n.C.BaseDir, "nodes", n.Name) }
func (n *Node) RunDir() string   { return filepath.Join(n.C.RunDir, n.Name) }
func (n *Node) EtcDir() string   { return filepath.Join(n.Dir(), "etc") }
func (n *Node) LogDir() string   { return filepath.Join(n.C.LogDir(), n.Name) }

// crust's own directories and socket: nothing shared with another node's crust.
func (n *Node) CrustRoot() string   { return filepath.Join(n.Dir(), "crust") }
func (n *Node) CrustState() string  { return filepath.Join(n.RunDir(), "crust") }
func (n *Node) CrustSocket() string { return filepath.Join(n.RunDir(), "crust.sock") }
func (n *Node) CNIConfDir() string  { return filepath.Join(n.EtcDir(), "net.d") }

// containerd's, when it is the nodes' runtime instead.
func (n *Node) ContainerdRoot() string   { return filepath.Join(n.Dir(), "containerd") }
func (n *Node) ContainerdState() string  { return filepath.Join(n.RunDir(), "containerd") }
func (n *Node) ContainerdSocket() string { return filepath.Join(n.RunDir(), "containerd.sock") }
func (n *Node) ContainerdConfig() string { return filepath.Join(n.EtcDir(), "containerd.toml") }

// ContainerdHostsDir holds a hosts.toml per mirrored registry (containerd's config_path).
func (n *Node) ContainerdHostsDir() string { return filepath.Join(n.EtcDir(), "certs.d") }

// RuntimeSocket is where the node's runtime serves CRI, which kubelet is given.
func (n *Node) RuntimeSocket() string {
	if n.C.Runtime == "containerd" {
		return n.ContainerdSocket()
	}
	return n.CrustSocket()
}
func (n *Node) IPAMDir() string { return filepath.Join(n.Dir(), "ipam") }

// kubelet's: its root, pod logs (kubelet removes entries of pods it does not know, so one
// directory per node), static pods.
func (n *Node) KubeletRoot() string  { return filepath.Join(n.Dir(), "kubelet") }
func (n *Node) PodLogsDir() string   { return filepath.Join(n.Dir(), "pod-logs") }
func (n *Node) StaticPodDir() string { return filepath.Join(n.EtcDir(), "manifests") }

// Cgroups: kubelet's cgroup root (it removes pod cgroups it does not know under it, so one per
// node), and a cgroup per process beside kubepods.
func (n *Node) CgroupRoot() string             { return n.C.CgroupBase() + "/" + n.Name }
func (n *Node) Cgroup(component string) string { return n.CgroupRoot() + "/" + component }

// Files of the node that `up` writes.
func (n *Node) CNITemplate() string         { return filepath.Join(n.EtcDir(), "cni-template.conflist") }
func (n *Node) CrustConfig() string         { return filepath.Join(n.EtcDir(), "crust.toml") }
func (n *Node) KubeletConfig() string       { return filepath.Join(n.EtcDir(), "kubelet.yaml") }
func (n *Node) KubeletKubeconfig() string   { return filepath.Join(n.EtcDir(), "kubelet.conf") }
func (n *Node) KubeProxyConfig() string     { return filepath.Join(n.EtcDir(), "kube-proxy.yaml") }
func (n *Node) KubeProxyKubeconfig() string { return filepath.Join(n.EtcDir(), "kube-proxy.conf") }
func (n *Node) KubeletCert() string         { return filepath.Join(n.EtcDir(), "kubelet.crt") }
func (n *Node) KubeletKey() string          { return filepath.Join(n.EtcDir(), "kubelet.key") }

// Files of the cluster.
func (c *Cluster) CACert() string     { return filepath.Join(c.PKIDir(), "ca.crt") }
func (c *Cluster) ResolvConf() string { return filepath.Join(c.BaseDir, "resolv.conf") }
