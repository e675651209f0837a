package main

// The control plane, laid out as kubeadm lays it out (its certificates in pki/, a kubeconfig
// per component, the flags kubeadm's static pod manifests give), run on the control-plane node,
// in its network namespace, so the API server is at that node's address and reaches Services
// through that node's kube-proxy, as a kubeadm API server does. Either as static pods of
// node-0's kubelet on node-0's crust, as kubeadm runs it (the default), or as host processes
// (--control-plane=host: no images, plain log files).

import (
	"fmt"
	"os"
	"path/filepath"
)

func (c *Cluster) cp(name string) string  { return filepath.Join(c.ControlPlaneDir(), name) }
func (c *Cluster) pki(name string) string { return filepath.Join(c.PKIDir(), name) }

// ControlPlaneProcs lists the control plane's processes in the order they start.
func ControlPlaneProcs(c *Cluster, b Binaries) []Proc {
	n := c.Node(0)
	svc := c.ServiceCIDR.String()
	etcd := NodeProc(n, "etcd", b.Path("etcd"),
		"--name="+n.Name,
		"--data-dir="+c.EtcdDir(),
		// On the node's loopback only, as no certificate guards it.
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster="+n.Name+"=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381",
	)
	apiserver := NodeProc(n, "kube-apiserver", b.Path("kube-apiserver"),
		"--advertise-address="+n.IP.String(),
		"--bind-address=0.0.0.0",
		"--secure-port=6443",
		"--etcd-servers=http://127.0.0.1:2379",
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--client-ca-file="+c.pki("ca.crt"),
		"--tls-cert-file="+c.pki("apiserver.crt"),
		"--tls-private-key-file="+c.pki("apiserver.key"),
		"--kubelet-client-certificate="+c.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+c.pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+c.pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--service-account-issuer=https://kubernetes.default.svc."+c.DNSDomain,
		"--service-account-key-file="+c.pki("sa.pub"),
		"--service-account-signing-key-file="+c.pki("sa.key"),
		"--service-cluster-ip-range="+svc,
		"--proxy-client-cert-file="+c.pki("front-proxy-client.crt"),
		"--proxy-client-key-file="+c.pki("front-proxy-client.key"),
		"--requestheader-client-ca-file="+c.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
	)
	kcmConf := c.cp("controller-manager.conf")
	kcm := NodeProc(n, "kube-controller-manager", b.Path("kube-controller-manager"),
		"--kubeconfig="+kcmConf,
		"--authentication-kubeconfig="+kcmConf,
		"--authorization-kubeconfig="+kcmConf,
		"--bind-address=127.0.0.1",
		"--client-ca-file="+c.pki("ca.crt"),
		"--requestheader-client-ca-file="+c.pki("front-proxy-ca.crt"),
		"--cluster-name=crust-"+c.Name,
		"--cluster-signing-cert-file="+c.pki("ca.crt"),
		"--cluster-signing-key-file="+c.pki("ca.key"),
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--leader-elect=true",
		"--root-ca-file="+c.pki("ca.crt"),
		"--service-account-private-key-file="+c.pki("sa.key"),
		"--use-service-account-credentials=true",
		// Each node's pod CIDR, which kubelet hands to crust and the harness routes.
		"--allocate-node-cidrs=true",
		"--cluster-cidr="+c.PodCIDR.String(),
		"--node-cidr-mask-size=24",
		"--service-cluster-ip-range="+svc,
	)
	schedConf := c.cp("scheduler.conf")
	scheduler := NodeProc(n, "kube-scheduler", b.Path("kube-scheduler"),
		"--config="+c.cp("scheduler.yaml"),
		"--authentication-kubeconfig="+schedConf,
		"--authorization-kubeconfig="+schedConf,
		"--bind-address=127.0.0.1",
	)
	return []Proc{etcd, apiserver, kcm, scheduler}
}

// WriteControlPlaneFiles writes the components' kubeconfigs, the administrator's, and the
// scheduler's configuration.
func WriteControlPlaneFiles(c *Cluster, p *PKI) error {
	for _, k := range []struct{ path, user, org string }{
		{c.Kubeconfig(), "kubernetes-admin", "system:masters"},
		{c.cp("controller-manager.conf"), "system:kube-controller-manager", ""},
		{c.cp("scheduler.conf"), "system:kube-scheduler", ""},
	} {
		var orgs []string
		if k.org != "" {
			orgs = []string{k.org}
		}
		if err := p.Kubeconfig(c, k.path, k.user, orgs...); err != nil {
			return fmt.Errorf("kubeconfig of %s: %w", k.user, err)
		}
	}
	b, err := RenderSchedulerConfig(c.cp("scheduler.conf"))
	if err != nil {
		return err
	}
	return writeFile(c.cp("scheduler.yaml"), b, 0o644)
}

// ControlPlaneImages are the images the static pods name, as kubeadm v1.37.2 names them.
var ControlPlaneImages = map[string]string{
	"etcd":                    "registry.k8s.io/etcd:3.7.0-0",
	"kube-apiserver":          "registry.k8s.io/kube-apiserver:v1.37.2",
	"kube-controller-manager": "registry.k8s.io/kube-controller-manager:v1.37.2",
	"kube-scheduler":          "registry.k8s.io/kube-scheduler:v1.37.2",
}

// StaticPod is one control-plane component as a static pod.
type StaticPod struct {
	Name, Image string
	Command     []string
	Mounts      []StaticMount
}

type StaticMount struct {
	Name, Path string
	ReadOnly   bool
}

// StaticPods turns the control plane's processes into static pods: the same flags, the binary
// where its image has it, the directories the flags name mounted at the same paths.
func StaticPods(c *Cluster, b Binaries) []StaticPod {
	var pods []StaticPod
	for _, p := range ControlPlaneProcs(c, b) {
		mounts := []StaticMount{{"pki", c.PKIDir(), true}, {"control-plane", c.ControlPlaneDir(), true}}
		if p.Name == "etcd" {
			mounts = []StaticMount{{"etcd-data", c.EtcdDir(), false}}
		}
		pods = append(pods, StaticPod{Name: p.Name, Image: ControlPlaneImages[p.Name],
			Command: append([]string{"/usr/local/bin/" + p.Name}, p.Argv[1:]...), Mounts: mounts})
	}
	return pods
}

func (c *Cluster) StaticPodManifest(name string) string {
	return filepath.Join(c.Node(0).StaticPodDir(), name+".yaml")
}

// StaticPodProc is the component's process as the harness looks for it: its binary, in
// node-0's pods' cgroups; its log, kubelet's log of the container.
func StaticPodProc(c *Cluster, name string) Proc {
	n := c.Node(0)
	return Proc{Name: name, Node: n, Argv: []string{"/usr/local/bin/" + name},
		Cgroup: n.CgroupRoot() + "/kubepods",
		Log:    filepath.Join(n.PodLogsDir(), "kube-system_"+name+"-"+n.Name+"_*", name, "*.log")}
}

// WriteStaticPods renders the control plane's static pods into node-0's manifest directory.
func WriteStaticPods(c *Cluster, b Binaries) error {
	for _, p := range StaticPods(c, b) {
		y, err := render("static-pod.yaml", p)
		if err != nil {
			return err
		}
		if err := writeFile(c.StaticPodManifest(p.Name), y, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// UsesStaticPods tells whether the cluster's control plane runs as static pods (its manifests
// are there).
func UsesStaticPods(c *Cluster) bool {
	_, err := os.Stat(c.StaticPodManifest("kube-apiserver"))
	return err == nil
}

// ControlPlane lists the control plane's processes as the harness checks them.
func ControlPlane(c *Cluster, b Binaries) []Proc {
	procs := ControlPlaneProcs(c, b)
	if UsesStaticPods(c) {
		for i, p := range procs {
			procs[i] = StaticPodProc(c, p.Name)
		}
	}
	return procs
}
