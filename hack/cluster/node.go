package main

// A node's processes and files: its runtime (crust, or containerd to compare with), its kubelet
// and its kube-proxy, all configured from the node's templates (render.go), all in the node's
// network namespace.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// NodeProcs lists the node's processes in the order they start.
func NodeProcs(n *Node, b Binaries) (runtime, kubelet, proxy Proc) {
	runtime = RuntimeProc(n, b)
	kubelet = NodeProc(n, "kubelet", b.Path("kubelet"),
		"--config="+n.KubeletConfig(),
		"--kubeconfig="+n.KubeletKubeconfig(),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP.String(),
		"--root-dir="+n.KubeletRoot(),
		// kubelet reports the runtime's usage from this cgroup.
		"--runtime-cgroups="+n.Cgroup(runtime.Name),
	)
	proxy = NodeProc(n, "kube-proxy", b.Path("kube-proxy"), "--config="+n.KubeProxyConfig())
	return runtime, kubelet, proxy
}

// RuntimeProc is the node's CRI runtime. containerd finds its shim on the PATH, and its shims
// stay in its cgroup, as under a unit of its own.
func RuntimeProc(n *Node, b Binaries) Proc {
	if n.C.Runtime == "containerd" {
		p := NodeProc(n, "containerd", filepath.Join(b.ContainerdDir, "containerd"), "--config", n.ContainerdConfig())
		p.Env = []string{"PATH=" + b.ContainerdDir + ":" + os.Getenv("PATH")}
		return p
	}
	return NodeProc(n, "crust", n.C.Crust(), "serve", "--config", n.CrustConfig())
}

// WriteNodeFiles writes the node's settings, certificates and kubeconfigs, and makes its
// directories.
func WriteNodeFiles(n *Node, p *PKI) error {
	files, err := NodeFiles(n)
	if err != nil {
		return err
	}
	for path, b := range files {
		if err := writeFile(path, b, 0o644); err != nil {
			return err
		}
	}
	for _, d := range []string{n.CNIConfDir(), n.StaticPodDir(), n.KubeletRoot(), n.PodLogsDir(),
		n.RunDir(), n.LogDir(), n.IPAMDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := makeCgroup(n.CgroupRoot()); err != nil {
		return fmt.Errorf("cgroup root of %s: %w", n.Name, err)
	}
	return p.NodeCerts(n)
}

// runtimeAnswers tells whether the node's runtime accepts connections on its socket.
func runtimeAnswers(n *Node) bool {
	conn, err := net.DialTimeout("unix", n.RuntimeSocket(), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
