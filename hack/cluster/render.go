package main

// Renders the node's settings and the addons from the templates in templates/: one struct in,
// one file out, no editing of generated text afterwards.

import (
	"bytes"
	"embed"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"text/template"
)

//go:embed templates/*
var templateFS embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").ParseFS(templateFS, "templates/*"))

func render(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("rendering %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// NodeFiles renders every settings file of a node, by path: its runtime's, kubelet's and
// kube-proxy's.
func NodeFiles(n *Node) (map[string][]byte, error) {
	files := map[string][]byte{}
	byPath := map[string]string{
		n.CNITemplate():     "cni.conflist",
		n.KubeletConfig():   "kubelet.yaml",
		n.KubeProxyConfig(): "kube-proxy.yaml",
	}
	if n.C.Runtime == "containerd" {
		byPath[n.ContainerdConfig()] = "containerd.toml"
	} else {
		byPath[n.CrustConfig()] = "crust.toml"
	}
	for path, tmpl := range byPath {
		b, err := render(tmpl, n)
		if err != nil {
			return nil, err
		}
		files[path] = b
	}
	if n.C.Runtime == "containerd" {
		for _, r := range n.C.MirroredRegistries() {
			b, err := render("hosts.toml", struct {
				Node     *Node
				Registry string
			}{n, r})
			if err != nil {
				return nil, err
			}
			files[filepath.Join(n.ContainerdHostsDir(), r, "hosts.toml")] = b
		}
	}
	return files, nil
}

// KubeconfigData is one kubeconfig: a server, the CA, and a client certificate.
type KubeconfigData struct {
	Cluster, Server, User string
	CA, Cert, Key         []byte // PEM
}

func (k KubeconfigData) CAData() string   { return base64.StdEncoding.EncodeToString(k.CA) }
func (k KubeconfigData) CertData() string { return base64.StdEncoding.EncodeToString(k.Cert) }
func (k KubeconfigData) KeyData() string  { return base64.StdEncoding.EncodeToString(k.Key) }

func RenderKubeconfig(k KubeconfigData) ([]byte, error) { return render("kubeconfig", k) }

func RenderSchedulerConfig(kubeconfig string) ([]byte, error) {
	return render("scheduler.yaml", struct{ Kubeconfig string }{kubeconfig})
}

// CoreDNSImage is the image Kubernetes v1.37.2's addon names (a stand-in on the offline registry).
const CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.6"

func RenderCoreDNS(c *Cluster) ([]byte, error) {
	return render("coredns.yaml", struct {
		DNSDomain, DNSIP, Image string
	}{c.DNSDomain, c.DNSIP().String(), CoreDNSImage})
}

// writeFile writes atomically (a temporary file renamed into place), creating the directory.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
