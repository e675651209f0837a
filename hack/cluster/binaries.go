package main

// Where the cluster's binaries are: the Kubernetes ones, etcd and ginkgo from
// `hack/build-tools.sh cluster`, CoreDNS from `hack/build-tools.sh coredns` (the wrapper
// passes both directories), crust from the worktree's cargo build. crust is copied into the
// cluster's directory: it starts its pods' monitors from its own executable, which a cargo
// build while the cluster runs would replace.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries holds the absolute path of every binary the cluster runs.
type Binaries struct {
	ToolsDir, CoreDNSDir, CrustSource string
	// ContainerdDir holds containerd and its runc shim (hack/build-tools.sh containerd), when the
	// nodes run containerd.
	ContainerdDir string
}

var kubeBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"kubelet", "kube-proxy", "kubectl", "sample-apiserver"}

func (b Binaries) Path(name string) string { return filepath.Join(b.ToolsDir, name) }

// Crust is the cluster's own copy of crust.
func (c *Cluster) Crust() string { return filepath.Join(c.BaseDir, "bin", "crust") }

// Check fails naming the first binary that is missing.
func (b Binaries) Check(c *Cluster) error {
	for _, name := range kubeBinaries {
		if err := executable(b.Path(name)); err != nil {
			return fmt.Errorf("%w (hack/build-tools.sh cluster builds it)", err)
		}
	}
	if c.Runtime == "containerd" {
		for _, name := range []string{"containerd", "containerd-shim-runc-v2"} {
			if err := executable(filepath.Join(b.ContainerdDir, name)); err != nil {
				return fmt.Errorf("%w (hack/build-tools.sh containerd builds it)", err)
			}
		}
		if _, err := exec.LookPath("runc"); err != nil {
			return fmt.Errorf("runc, which containerd's shim runs, is missing (hack/install-deps.sh test)")
		}
		return nil
	}
	if err := executable(b.CrustSource); err != nil {
		return fmt.Errorf("%w (cargo build --release --bins)", err)
	}
	return nil
}

// CoreDNS is the coredns binary, or "" when no directory was given.
func (b Binaries) CoreDNS() (string, error) {
	if b.CoreDNSDir == "" {
		return "", nil
	}
	p := filepath.Join(b.CoreDNSDir, "coredns")
	return p, executable(p)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s is missing", p)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable", p)
	}
	return nil
}

// InstallCrust copies crust into the cluster's directory.
func (b Binaries) InstallCrust(c *Cluster) error {
	src, err := os.Open(b.CrustSource)
	if err != nil {
		return err
	}
	defer src.Close()
	dst := c.Crust()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.OpenFile(dst+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}
