package main

// `up`: ordered steps, each one concern, each failing with what it saw. A failed `up` is taken
// down whole (unless --retain), by the same `down` that works from nothing but the name.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Up brings a cluster up; it holds what the steps share.
type Up struct {
	C   *Cluster
	B   Binaries
	K   Kube
	Out io.Writer

	pki       *PKI
	controlPl []Proc
	nodeProcs []Proc // crusts and kubelets, then kube-proxies once started
	proxies   []Proc
}

type step struct {
	name string
	run  func() error
}

func (u *Up) Run() error {
	steps := []step{
		{"check the machine", u.preflight},
		{"certificates and settings", u.files},
		{"network", u.network},
		{"control plane", u.controlPlane},
		{"nodes", u.nodes},
		{"pod routes", u.routes},
		{"kube-proxy", u.kubeProxy},
		{"nodes ready", u.ready},
		{"control-plane node", u.markControlPlane},
		{"CoreDNS", u.coreDNS},
	}
	for _, s := range steps {
		start := time.Now()
		fmt.Fprintf(u.Out, "cluster: %s ...\n", s.name)
		if err := s.run(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(u.Out, "cluster: %s: done in %.1fs\n", s.name, time.Since(start).Seconds())
	}
	return nil
}

// leftovers names what of the cluster exists on the machine.
func leftovers(c *Cluster) []string {
	var found []string
	if nss, _ := clusterNetns(c); len(nss) > 0 {
		found = append(found, "network namespaces "+strings.Join(nss, " "))
	}
	if links, _ := clusterLinks(c); len(links) > 0 {
		found = append(found, "links "+strings.Join(links, " "))
	}
	if rules := hostRules(c); len(rules) > 0 {
		found = append(found, "iptables rules ("+rules[0]+"...)")
	}
	if cgroupExists(c.CgroupBase()) {
		found = append(found, "cgroup "+c.CgroupBase())
	}
	if ms := clusterMounts(c); len(ms) > 0 {
		found = append(found, fmt.Sprintf("%d mounts (%s ...)", len(ms), ms[0]))
	}
	for _, d := range []string{c.RunDir, c.BaseDir} {
		if _, err := os.Stat(d); err == nil {
			found = append(found, "directory "+d)
		}
	}
	return found
}

func (u *Up) preflight() error {
	if err := u.C.Validate(); err != nil {
		return err
	}
	if err := u.B.Check(); err != nil {
		return err
	}
	if found := leftovers(u.C); len(found) > 0 {
		return fmt.Errorf("cluster %s exists or was left behind (%s): take it down first (hack/cluster.sh down)",
			u.C.Name, strings.Join(found, "; "))
	}
	if err := subnetFree(u.C); err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/v2/", u.C.RegistryPort)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return fmt.Errorf("the offline registry does not answer at %s (../shared/tools/offline-registry.sh start): %w", url, err)
	}
	resp.Body.Close()
	return nil
}

func (u *Up) files() error {
	c := u.C
	for _, d := range []string{c.BaseDir, c.RunDir, c.LogDir(), c.EtcdDir(), c.ControlPlaneDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(c.EtcdDir(), 0o700); err != nil {
		return err
	}
	var err error
	if u.pki, err = NewPKI(c); err != nil {
		return err
	}
	if err := WriteControlPlaneFiles(c, u.pki); err != nil {
		return err
	}
	// No upstream name server: the cluster is offline.
	if err := writeFile(c.ResolvConf(), []byte("# the test cluster has no upstream name server\n"), 0o644); err != nil {
		return err
	}
	if err := u.B.InstallCrust(c); err != nil {
		return err
	}
	// kubectl beside the kubeconfig, for a user of the cluster.
	if err := os.Symlink(u.B.Path("kubectl"), filepath.Join(c.BaseDir, "kubectl")); err != nil {
		return err
	}
	if err := makeCgroup(c.CgroupBase()); err != nil {
		return err
	}
	for _, n := range c.Nodes() {
		if err := WriteNodeFiles(n, u.pki); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

func (u *Up) network() error {
	if err := SetupHost(u.C); err != nil {
		return err
	}
	for _, n := range u.C.Nodes() {
		if err := SetupNode(n); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

func (u *Up) controlPlane() error {
	c := u.C
	n0 := c.Node(0)
	u.controlPl = ControlPlaneProcs(c, u.B)
	etcd, apiserver, kcm, scheduler := u.controlPl[0], u.controlPl[1], u.controlPl[2], u.controlPl[3]
	if err := etcd.Start(); err != nil {
		return err
	}
	err := waitFor("etcd's /health", time.Minute, func() (bool, string, error) {
		code, body, err := getIn(n0, "http://127.0.0.1:2381/health")
		if err != nil {
			return false, err.Error(), alive(etcd)
		}
		return code == 200 && strings.Contains(body, `"true"`), fmt.Sprintf("%d %s", code, body), alive(etcd)
	})
	if err != nil {
		return err
	}
	if err := apiserver.Start(); err != nil {
		return err
	}
	err = waitFor("the API server's /readyz", 3*time.Minute, func() (bool, string, error) {
		out, err := u.K.Run("get", "--raw=/readyz")
		if err != nil {
			return false, err.Error(), alive(etcd, apiserver)
		}
		return strings.TrimSpace(out) == "ok", out, nil
	})
	if err != nil {
		return err
	}
	for _, p := range []Proc{kcm, scheduler} {
		if err := p.Start(); err != nil {
			return err
		}
	}
	for _, h := range []struct {
		p   Proc
		url string
	}{{kcm, "https://127.0.0.1:10257/healthz"}, {scheduler, "https://127.0.0.1:10259/healthz"}} {
		err := waitFor(h.p.Name+"'s /healthz", 2*time.Minute, func() (bool, string, error) {
			code, body, err := getIn(n0, h.url)
			if err != nil {
				return false, err.Error(), alive(h.p)
			}
			return code == 200, fmt.Sprintf("%d %s", code, body), alive(h.p)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (u *Up) nodes() error {
	var crusts, kubelets, proxies []Proc
	for _, n := range u.C.Nodes() {
		crust, kubelet, proxy := NodeProcs(n, u.B)
		crusts, kubelets, proxies = append(crusts, crust), append(kubelets, kubelet), append(proxies, proxy)
	}
	u.nodeProcs = append(append([]Proc{}, crusts...), kubelets...)
	u.proxies = proxies
	for i, n := range u.C.Nodes() {
		if err := crusts[i].Start(); err != nil {
			return err
		}
		err := waitFor("crust of "+n.Name+" on "+n.CrustSocket(), time.Minute, func() (bool, string, error) {
			return crustAnswers(n), "no answer on the socket", alive(crusts[i])
		})
		if err != nil {
			return err
		}
	}
	for _, p := range kubelets {
		if err := p.Start(); err != nil {
			return err
		}
	}
	return waitFor("every node registered with a pod CIDR", 3*time.Minute, func() (bool, string, error) {
		if err := alive(u.nodeProcs...); err != nil {
			return false, "", err
		}
		nodes, err := u.K.Nodes()
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range u.C.Nodes() {
			if nodes[n.Name].PodCIDR == "" {
				return false, describeNodes(nodes), nil
			}
		}
		return true, describeNodes(nodes), nil
	})
}

func (u *Up) routes() error {
	nodes, err := u.K.Nodes()
	if err != nil {
		return err
	}
	cidrs := map[string]string{}
	for name, n := range nodes {
		cidrs[name] = n.PodCIDR
	}
	return RoutePodCIDRs(u.C.Nodes(), cidrs)
}

// kubeProxy starts each node's kube-proxy once its Node exists (kube-proxy takes the node's
// address from it, and falls back to 127.0.0.1 when it finds none), as local-up-cluster.sh does.
func (u *Up) kubeProxy() error {
	for _, p := range u.proxies {
		if err := p.Start(); err != nil {
			return err
		}
	}
	u.nodeProcs = append(u.nodeProcs, u.proxies...)
	for _, p := range u.proxies {
		n := p.Node
		err := waitFor("kube-proxy of "+n.Name+" healthy", time.Minute, func() (bool, string, error) {
			code, body, err := getIn(n, "http://127.0.0.1:10256/healthz")
			if err != nil {
				return false, err.Error(), alive(p)
			}
			return code == 200, fmt.Sprintf("%d %s", code, body), alive(p)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (u *Up) ready() error {
	return waitFor("every node Ready", 3*time.Minute, func() (bool, string, error) {
		if err := alive(append(append([]Proc{}, u.controlPl...), u.nodeProcs...)...); err != nil {
			return false, "", err
		}
		nodes, err := u.K.Nodes()
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range u.C.Nodes() {
			if nodes[n.Name].Ready != "True" {
				return false, describeNodes(nodes), nil
			}
		}
		return true, describeNodes(nodes), nil
	})
}

// markControlPlane labels the control-plane node as kubeadm's mark-control-plane phase does
// (kubelet may not set node-role labels on itself; its taint it registered with).
func (u *Up) markControlPlane() error {
	n := u.C.Node(0)
	if _, err := u.K.Run("label", "node", n.Name, "--overwrite",
		"node-role.kubernetes.io/control-plane=",
		"node.kubernetes.io/exclude-from-external-load-balancers="); err != nil {
		return err
	}
	nodes, err := u.K.Nodes()
	if err != nil {
		return err
	}
	for _, t := range nodes[n.Name].Taints {
		if t == "node-role.kubernetes.io/control-plane:NoSchedule" {
			return nil
		}
	}
	return fmt.Errorf("%s registered without the control-plane taint (taints: %v)", n.Name, nodes[n.Name].Taints)
}

func (u *Up) coreDNS() error {
	bin, err := u.B.CoreDNS()
	if err != nil {
		return err
	}
	if bin == "" {
		fmt.Fprintln(u.Out, "cluster: CoreDNS: no coredns directory given (--coredns): the cluster has no DNS")
		return nil
	}
	if err := PushCoreDNSImage(u.C, bin); err != nil {
		return err
	}
	manifest, err := RenderCoreDNS(u.C)
	if err != nil {
		return err
	}
	path := filepath.Join(u.C.ControlPlaneDir(), "coredns.yaml")
	if err := writeFile(path, manifest, 0o644); err != nil {
		return err
	}
	if _, err := u.K.Run("apply", "-f", path); err != nil {
		return err
	}
	return waitFor("CoreDNS available", 3*time.Minute, func() (bool, string, error) {
		out, err := u.K.Run("-n", "kube-system", "get", "deployment", "coredns", "-o",
			"jsonpath={.status.availableReplicas}/{.spec.replicas}")
		if err != nil {
			return false, err.Error(), nil
		}
		pods, _ := u.K.Run("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o",
			"jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}; {end}")
		return out == "2/2", "available/replicas " + out + "; pods: " + pods, nil
	})
}
