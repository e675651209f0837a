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
	// StaticControlPlane runs the control plane as static pods of node-0 (else host processes).
	StaticControlPlane bool

	pki       *PKI
	controlPl []Proc
	nodeProcs []Proc // crusts and kubelets, then kube-proxies once started
	proxies   []Proc
	started   map[string]bool // nodes whose crust and kubelet run
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
		{"images", u.images},
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
	if err := u.B.Check(u.C); err != nil {
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
	if err := writeFile(c.RuntimeFile(), []byte(c.Runtime+"\n"), 0o644); err != nil {
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
	if c.Runtime == "crust" {
		if err := u.B.InstallCrust(c); err != nil {
			return err
		}
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
	if u.StaticControlPlane {
		return WriteStaticPods(c, u.B)
	}
	return nil
}

// images pushes to the offline registry the images the suite runs beyond the node suite's
// stand-ins (the Aggregator spec's sample-apiserver and its etcd sidecar) and the control
// plane's (for its static pods).
func (u *Up) images() error {
	if err := PushSuiteImages(u.C, u.B); err != nil {
		return err
	}
	if !u.StaticControlPlane {
		return nil
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if err := PushBinaryImage(u.C, ControlPlaneImages[name], u.B.Path(name)); err != nil {
			return err
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

// controlPlane starts the control plane and waits for each component's health endpoint: as
// host processes one after the other, or as static pods, which node-0's kubelet starts on
// node-0's crust all at once (the kubelet then registers node-0 once the API server answers).
func (u *Up) controlPlane() error {
	c := u.C
	n0 := c.Node(0)
	var etcd, apiserver, kcm, scheduler Proc
	// What must keep running meanwhile: the component itself, or node-0's crust and kubelet.
	var keep func(p ...Proc) []Proc
	if u.StaticControlPlane {
		if err := u.startNode(n0); err != nil {
			return err
		}
		for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			u.controlPl = append(u.controlPl, StaticPodProc(c, name))
		}
		base := append([]Proc{}, u.nodeProcs...)
		keep = func(...Proc) []Proc { return base }
	} else {
		u.controlPl = ControlPlaneProcs(c, u.B)
		keep = func(p ...Proc) []Proc { return p }
	}
	etcd, apiserver, kcm, scheduler = u.controlPl[0], u.controlPl[1], u.controlPl[2], u.controlPl[3]
	start := func(ps ...Proc) error {
		if u.StaticControlPlane {
			return nil
		}
		for _, p := range ps {
			if err := p.Start(); err != nil {
				return err
			}
		}
		return nil
	}
	health := func(p Proc, url string, timeout time.Duration, ok func(int, string) bool) error {
		return waitFor(p.Name+"'s "+url, timeout, func() (bool, string, error) {
			code, body, err := getIn(n0, url)
			if err != nil {
				return false, err.Error() + "; the end of its log: " + p.LogTail(3), alive(keep(p)...)
			}
			return ok(code, body), fmt.Sprintf("%d %s", code, body), alive(keep(p)...)
		})
	}
	if err := start(etcd); err != nil {
		return err
	}
	err := health(etcd, "http://127.0.0.1:2381/health", 2*time.Minute, func(code int, body string) bool {
		return code == 200 && strings.Contains(body, `"true"`)
	})
	if err != nil {
		return err
	}
	if err := start(apiserver); err != nil {
		return err
	}
	err = waitFor("the API server's /readyz", 3*time.Minute, func() (bool, string, error) {
		out, err := u.K.Run("get", "--raw=/readyz")
		if err != nil {
			return false, err.Error() + "; the end of its log: " + apiserver.LogTail(3), alive(keep(etcd, apiserver)...)
		}
		return strings.TrimSpace(out) == "ok", out, nil
	})
	if err != nil {
		return err
	}
	if err := start(kcm, scheduler); err != nil {
		return err
	}
	for _, h := range []struct {
		p   Proc
		url string
	}{{kcm, "https://127.0.0.1:10257/healthz"}, {scheduler, "https://127.0.0.1:10259/healthz"}} {
		if err := health(h.p, h.url, 2*time.Minute, func(code int, _ string) bool { return code == 200 }); err != nil {
			return err
		}
	}
	return nil
}

// startNode starts a node's crust, waits until it answers, then starts its kubelet.
func (u *Up) startNode(n *Node) error {
	if u.started == nil {
		u.started = map[string]bool{}
	}
	runtime, kubelet, proxy := NodeProcs(n, u.B)
	u.proxies = append(u.proxies, proxy)
	if err := runtime.Start(); err != nil {
		return err
	}
	err := waitFor(runtime.Name+" of "+n.Name+" on "+n.RuntimeSocket(), time.Minute, func() (bool, string, error) {
		return runtimeAnswers(n), "no answer on the socket", alive(runtime)
	})
	if err != nil {
		return err
	}
	if err := kubelet.Start(); err != nil {
		return err
	}
	u.nodeProcs = append(u.nodeProcs, runtime, kubelet)
	u.started[n.Name] = true
	return nil
}

func (u *Up) nodes() error {
	for _, n := range u.C.Nodes() {
		if u.started[n.Name] {
			continue
		}
		if err := u.startNode(n); err != nil {
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
	tainted := false
	for _, t := range nodes[n.Name].Taints {
		tainted = tainted || t == "node-role.kubernetes.io/control-plane:NoSchedule"
	}
	if !tainted {
		return fmt.Errorf("%s registered without the control-plane taint (taints: %v)", n.Name, nodes[n.Name].Taints)
	}
	if !u.StaticControlPlane {
		return nil
	}
	// The static pods' mirror pods, which kubelet creates once the API server has its system
	// priority classes (at its next sync of those pods, up to a minute later).
	return waitFor("the control plane's mirror pods Ready", 3*time.Minute, func() (bool, string, error) {
		out, err := u.K.Run("-n", "kube-system", "get", "pods", "-l", "tier=control-plane", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.Count(out, "=True") == 4, "mirror pods: " + out, alive(u.nodeProcs...)
	})
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
