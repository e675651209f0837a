package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func testCluster(t *testing.T) *Cluster {
	t.Helper()
	c := DefaultCluster("t1")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

func files(t *testing.T, n *Node) map[string]string {
	t.Helper()
	fs, err := NodeFiles(n)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for p, b := range fs {
		out[p] = string(b)
	}
	return out
}

func wantLines(t *testing.T, what, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l+"\n") {
			t.Errorf("%s lacks the line %q:\n%s", what, l, text)
		}
	}
}

func TestCrustConfigIsTheNodesOwn(t *testing.T) {
	c := testCluster(t)
	n := c.Node(1)
	toml := files(t, n)[n.CrustConfig()]
	wantLines(t, "crust.toml", toml,
		`listen = "unix:///run/crust-cluster/t1/node-1/crust.sock"`,
		`root = "/var/lib/crust-cluster/t1/nodes/node-1/crust"`,
		`state = "/run/crust-cluster/t1/node-1/crust"`,
		`default_cgroup_parent = "/crust-t1/node-1/crust-pods"`,
		`conf_dir = "/var/lib/crust-cluster/t1/nodes/node-1/etc/net.d"`,
		`conf_template = "/var/lib/crust-cluster/t1/nodes/node-1/etc/cni-template.conflist"`,
		`masquerade_subnets = ["10.244.0.0/16"]`,
		`endpoints = ["http://172.30.40.1:5000"]`,
		`enable = false`,
	)
	if strings.Contains(toml, "{{") {
		t.Errorf("crust.toml has an unrendered placeholder:\n%s", toml)
	}
}

func TestCNITemplateKeepsCrustsPlaceholder(t *testing.T) {
	c := testCluster(t)
	n := c.Node(2)
	text := files(t, n)[n.CNITemplate()]
	if strings.Count(text, "{{") != 1 || !strings.Contains(text, `"subnet": "{{.PodCIDR}}"`) {
		t.Fatalf("the template must hold crust's {{.PodCIDR}} once and nothing else:\n%s", text)
	}
	var conf struct {
		Name    string
		Plugins []struct {
			Type string
			IPAM struct{ DataDir string } `json:"ipam"`
		}
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(text, "{{.PodCIDR}}", "10.244.2.0/24")), &conf); err != nil {
		t.Fatalf("not JSON once filled in: %v\n%s", err, text)
	}
	if conf.Plugins[0].Type != "bridge" || conf.Plugins[0].IPAM.DataDir != n.IPAMDir() {
		t.Errorf("bridge with the node's own IPAM directory expected: %+v", conf)
	}
}

func TestKubeletConfig(t *testing.T) {
	c := testCluster(t)
	worker := files(t, c.Node(1))[c.Node(1).KubeletConfig()]
	wantLines(t, "kubelet.yaml", worker,
		"containerRuntimeEndpoint: unix:///run/crust-cluster/t1/node-1/crust.sock",
		"cgroupDriver: cgroupfs",
		"failCgroupV1: false",
		"cgroupRoot: /crust-t1/node-1",
		"podLogsDir: /var/lib/crust-cluster/t1/nodes/node-1/pod-logs",
		"  PodAndContainerStatsFromCRI: true",
		"  - 10.96.0.10",
		"clusterDomain: cluster.local",
	)
	if strings.Contains(worker, "registerWithTaints") {
		t.Errorf("a worker registers without taints:\n%s", worker)
	}
	cp := files(t, c.Node(0))[c.Node(0).KubeletConfig()]
	wantLines(t, "control-plane kubelet.yaml", cp,
		"registerWithTaints:", "  - key: node-role.kubernetes.io/control-plane", "    effect: NoSchedule")
}

func TestKubeProxyConfig(t *testing.T) {
	c := testCluster(t)
	n := c.Node(2)
	wantLines(t, "kube-proxy.yaml", files(t, n)[n.KubeProxyConfig()],
		"hostnameOverride: node-2", "mode: iptables", "clusterCIDR: 10.244.0.0/16",
		"  kubeconfig: /var/lib/crust-cluster/t1/nodes/node-2/etc/kube-proxy.conf", "  maxPerCore: 0")
}

// Nothing of one node's may be another's: two kubelets on one cgroup root or pod log
// directory remove each other's pods, two crusts on one state share records.
func TestNodesShareNothing(t *testing.T) {
	c := DefaultCluster("abcdef")
	c.Workers = 9
	seen := map[string]string{}
	for _, n := range c.Nodes() {
		for _, v := range []string{n.Netns(), n.HostVeth(), n.IP.String(), n.Dir(), n.RunDir(),
			n.CrustRoot(), n.CrustState(), n.CrustSocket(), n.KubeletRoot(), n.PodLogsDir(),
			n.CgroupRoot(), n.IPAMDir(), n.CNIConfDir(), n.LogDir()} {
			if other, ok := seen[v]; ok {
				t.Errorf("%s is both %s's and %s's", v, other, n.Name)
			}
			seen[v] = n.Name
		}
		if len(n.HostVeth()) > 15 {
			t.Errorf("interface name %s is longer than 15 bytes", n.HostVeth())
		}
	}
	if c.Bridge() == c.Node(0).HostVeth() || len(c.Bridge()) > 15 {
		t.Errorf("bad bridge name %s", c.Bridge())
	}
}

func TestValidate(t *testing.T) {
	for _, name := range []string{"", "UPPER", "toolong1", "a-b"} {
		c := DefaultCluster(name)
		if c.Validate() == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	c := DefaultCluster("ok")
	c.Workers = 10
	if c.Validate() == nil {
		t.Error("10 workers accepted (node index must stay one digit)")
	}
}

func TestCoreDNSManifest(t *testing.T) {
	c := testCluster(t)
	b, err := RenderCoreDNS(c)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	wantLines(t, "coredns.yaml", text, "  clusterIP: 10.96.0.10", "        image: "+CoreDNSImage,
		"        kubernetes cluster.local in-addr.arpa ip6.arpa {", "  replicas: 2")
	for _, gone := range []string{"        forward .", "        loop\n", "dns_"} {
		if strings.Contains(text, gone) {
			t.Errorf("coredns.yaml still has %q", gone)
		}
	}
}

func TestKubeconfig(t *testing.T) {
	b, err := RenderKubeconfig(KubeconfigData{Cluster: "crust-t1", Server: "https://172.30.40.10:6443",
		User: "system:node:node-1", CA: []byte("ca"), Cert: []byte("c"), Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, "kubeconfig", string(b), "    server: https://172.30.40.10:6443",
		"    certificate-authority-data: Y2E=", "current-context: system:node:node-1@crust-t1")
}

func TestRegistryPath(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/coredns/coredns:v1.14.6": "coredns/coredns:v1.14.6",
		"docker.io/library/busybox:1.36.1":        "library/busybox:1.36.1",
		"localhost:5000/x:1":                      "x:1",
		"library/busybox:1":                       "library/busybox:1",
	} {
		if got := registryPath(ref); got != want {
			t.Errorf("registryPath(%s) = %s, want %s", ref, got, want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b`); got != "/var/lib/a b" {
		t.Errorf("got %q", got)
	}
}

func TestStaticPods(t *testing.T) {
	c := testCluster(t)
	pods := StaticPods(c, Binaries{ToolsDir: "/tools"})
	if len(pods) != 4 {
		t.Fatalf("%d static pods", len(pods))
	}
	for _, p := range pods {
		b, err := render("static-pod.yaml", p)
		if err != nil {
			t.Fatal(err)
		}
		y := string(b)
		wantLines(t, p.Name, y, "  name: "+p.Name, "  hostNetwork: true", "    image: "+ControlPlaneImages[p.Name],
			`    - "/usr/local/bin/`+p.Name+`"`)
		if strings.Contains(y, "/tools/") {
			t.Errorf("%s names the host's binary:\n%s", p.Name, y)
		}
	}
	api := string(must(render("static-pod.yaml", pods[1])))
	wantLines(t, "kube-apiserver", api, `    - "--advertise-address=172.30.40.10"`,
		"      path: /var/lib/crust-cluster/t1/pki", "      mountPath: /var/lib/crust-cluster/t1/pki")
	etcd := string(must(render("static-pod.yaml", pods[0])))
	wantLines(t, "etcd", etcd, "      path: /var/lib/crust-cluster/t1/etcd", "      readOnly: false")
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
