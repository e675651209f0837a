package main

// Images the cluster needs beyond the node suite's stand-ins: CoreDNS (the coredns binary built
// from hack/tools/coredns) and the control plane's (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler: each binary with the libraries it links), one layer
// each, pushed under their upstream paths to the offline registry (host dropped, path kept, as
// every stand-in there) with skopeo. Reproducible (fixed times, sorted entries), so an image
// already on the registry is not pushed again.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

var imageEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type blob struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int    `json:"size"`
}

// ociLayout writes blobs into an OCI image layout.
type ociLayout struct{ dir string }

func (l ociLayout) put(mediaType string, b []byte) (blob, error) {
	sum := fmt.Sprintf("%x", sha256.Sum256(b))
	if err := writeFile(filepath.Join(l.dir, "blobs", "sha256", sum), b, 0o644); err != nil {
		return blob{}, err
	}
	return blob{MediaType: mediaType, Digest: "sha256:" + sum, Size: len(b)}, nil
}

// imageFile is one file of an image: where it goes, where it comes from.
type imageFile struct{ Dest, Src string }

// binaryImage builds, into an OCI layout at dir, an image of one layer holding the files (with
// their parent directories) and the entrypoint; it returns the image index's digest.
func binaryImage(dir string, files []imageFile, entrypoint string, ports []string) (string, error) {
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	dirs := map[string]bool{}
	sort.Slice(files, func(i, j int) bool { return files[i].Dest < files[j].Dest })
	for _, f := range files {
		rel := strings.TrimPrefix(f.Dest, "/")
		var parents []string
		for d := filepath.Dir(rel); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, ModTime: imageEpoch,
				Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
				return "", err
			}
		}
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o755, Size: int64(len(data)),
			ModTime: imageEpoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	diffID := fmt.Sprintf("sha256:%x", sha256.Sum256(tarBuf.Bytes()))
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	l := ociLayout{dir}
	layer, err := l.put("application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes())
	if err != nil {
		return "", err
	}
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	config, _ := json.Marshal(map[string]any{
		"created": imageEpoch.Format(time.RFC3339), "architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{entrypoint}, "ExposedPorts": exposed,
			"WorkingDir": "/", "Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	cfg, err := l.put("application/vnd.oci.image.config.v1+json", config)
	if err != nil {
		return "", err
	}
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2,
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg, "layers": []blob{layer}})
	m, err := l.put("application/vnd.oci.image.manifest.v1+json", manifest)
	if err != nil {
		return "", err
	}
	indexDoc := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType": m.MediaType, "digest": m.Digest, "size": m.Size,
			"platform": map[string]string{"architecture": "amd64", "os": "linux"},
		}}}
	index, _ := json.Marshal(indexDoc)
	idx, err := l.put("application/vnd.oci.image.index.v1+json", index)
	if err != nil {
		return "", err
	}
	// The layout's own index points at the image index, named for skopeo.
	top, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []map[string]any{{
		"mediaType": idx.MediaType, "digest": idx.Digest, "size": idx.Size,
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "img"},
	}}})
	if err := writeFile(filepath.Join(dir, "index.json"), top, 0o644); err != nil {
		return "", err
	}
	return idx.Digest, writeFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// withLibraries adds the shared libraries a dynamically linked binary loads (ldd's list), at
// the paths the binary looks for them.
func withLibraries(files []imageFile, bin string) ([]imageFile, error) {
	out, err := run("ldd", bin)
	if err != nil {
		if strings.Contains(out+err.Error(), "not a dynamic executable") {
			return files, nil
		}
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		var path string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			path = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			path = f[0]
		default:
			continue
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, err
		}
		files = append(files, imageFile{Dest: path, Src: real})
	}
	return files, nil
}

// pushImage pushes the layout at dir as ref to the offline registry, unless the registry has
// that very image already.
func pushImage(c *Cluster, dir, digest, ref string) error {
	path := registryPath(ref)
	name, tag := path, "latest"
	if i := strings.LastIndex(path, ":"); i >= 0 {
		name, tag = path[:i], path[i+1:]
	}
	req, _ := http.NewRequest(http.MethodHead, fmt.Sprintf("http://127.0.0.1:%d/v2/%s/manifests/%s", c.RegistryPort, name, tag), nil)
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 && resp.Header.Get("Docker-Content-Digest") == digest {
			return nil
		}
	}
	dest := fmt.Sprintf("docker://127.0.0.1:%d/%s", c.RegistryPort, path)
	_, err := run("skopeo", "copy", "-q", "--all", "--preserve-digests", "--dest-tls-verify=false", "oci:"+dir+":img", dest)
	return err
}

// registryPath is an image reference's path on the offline registry: the host dropped.
func registryPath(ref string) string {
	if i := strings.Index(ref, "/"); i >= 0 && strings.ContainsAny(ref[:i], ".:") {
		return ref[i+1:]
	}
	return ref
}

// PushCoreDNSImage pushes the CoreDNS stand-in the addon names: /coredns, static.
func PushCoreDNSImage(c *Cluster, bin string) error {
	dir := filepath.Join(c.BaseDir, "images", "coredns")
	digest, err := binaryImage(dir, []imageFile{{"/coredns", bin}}, "/coredns", []string{"53/tcp", "53/udp", "9153/tcp"})
	if err != nil {
		return fmt.Errorf("building the CoreDNS image: %w", err)
	}
	return pushImage(c, dir, digest, CoreDNSImage)
}

// PushBinaryImage pushes an image of a binary of the cluster at /usr/local/bin/<name> (where
// the upstream images have it), with the libraries it links.
func PushBinaryImage(c *Cluster, ref, bin string) error {
	name := filepath.Base(bin)
	files, err := withLibraries([]imageFile{{"/usr/local/bin/" + name, bin}}, bin)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.BaseDir, "images", name)
	digest, err := binaryImage(dir, files, "/usr/local/bin/"+name, nil)
	if err != nil {
		return fmt.Errorf("building the %s image: %w", name, err)
	}
	return pushImage(c, dir, digest, ref)
}

// SampleAPIServerImage is the image the Aggregator spec registers an aggregated API server
// with (test/utils/image/manifest.go's APIServer); its etcd sidecar runs ControlPlaneImages'
// etcd, /usr/local/bin/etcd.
const SampleAPIServerImage = "registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2"

// PushSuiteImages pushes the images of the conformance suite that are binaries of the
// cluster's module: sample-apiserver (static, at /sample-apiserver as its Dockerfile puts it)
// and etcd.
func PushSuiteImages(c *Cluster, b Binaries) error {
	dir := filepath.Join(c.BaseDir, "images", "sample-apiserver")
	bin := b.Path("sample-apiserver")
	digest, err := binaryImage(dir, []imageFile{{"/sample-apiserver", bin}}, "/sample-apiserver", nil)
	if err != nil {
		return fmt.Errorf("building the sample-apiserver image: %w", err)
	}
	if err := pushImage(c, dir, digest, SampleAPIServerImage); err != nil {
		return fmt.Errorf("pushing %s: %w", SampleAPIServerImage, err)
	}
	return PushBinaryImage(c, ControlPlaneImages["etcd"], b.Path("etcd"))
}
