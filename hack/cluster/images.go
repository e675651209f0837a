package main

// Images the cluster needs beyond the node suite's stand-ins: CoreDNS, one layer holding the
// coredns binary built from hack/tools/coredns, pushed under its upstream path to the offline
// registry (host dropped, path kept, as every stand-in there) with skopeo. Reproducible: fixed
// times, so the same binary gives the same digest.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// singleFileImage builds an image of one executable at /<name> as its entrypoint, and returns
// the layout's directory.
func singleFileImage(dir, bin, name string, ports []string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)),
		ModTime: imageEpoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	diffID := fmt.Sprintf("sha256:%x", sha256.Sum256(tarBuf.Bytes()))
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	l := ociLayout{dir}
	layer, err := l.put("application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes())
	if err != nil {
		return err
	}
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	config, _ := json.Marshal(map[string]any{
		"created": imageEpoch.Format(time.RFC3339), "architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/" + name}, "ExposedPorts": exposed,
			"WorkingDir": "/"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	cfg, err := l.put("application/vnd.oci.image.config.v1+json", config)
	if err != nil {
		return err
	}
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2,
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cfg, "layers": []blob{layer}})
	m, err := l.put("application/vnd.oci.image.manifest.v1+json", manifest)
	if err != nil {
		return err
	}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []map[string]any{{
		"mediaType": m.MediaType, "digest": m.Digest, "size": m.Size,
		"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "img"},
	}}})
	if err := writeFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// registryPath is an image reference's path on the offline registry: the host dropped.
func registryPath(ref string) string {
	if i := strings.Index(ref, "/"); i >= 0 && strings.ContainsAny(ref[:i], ".:") {
		return ref[i+1:]
	}
	return ref
}

// PushCoreDNSImage pushes the CoreDNS stand-in the addon names.
func PushCoreDNSImage(c *Cluster, bin string) error {
	dir := filepath.Join(c.BaseDir, "images", "coredns")
	if err := singleFileImage(dir, bin, "coredns", []string{"53/tcp", "53/udp", "9153/tcp"}); err != nil {
		return fmt.Errorf("building the CoreDNS image: %w", err)
	}
	dest := fmt.Sprintf("docker://127.0.0.1:%d/%s", c.RegistryPort, registryPath(CoreDNSImage))
	_, err := run("skopeo", "copy", "-q", "--preserve-digests", "--dest-tls-verify=false", "oci:"+dir+":img", dest)
	return err
}
