package main

// The cluster's certificates, laid out as kubeadm lays out /etc/kubernetes/pki: the cluster CA
// (API server serving, its kubelet client, every component's client certificate, the kubelets'
// serving certificates), the front-proxy CA for the aggregation layer, and the service-account
// key. ECDSA P-256 throughout. Made once per `up` with Go's crypto/x509 (no cfssl, no openssl).

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"

	"path/filepath"
	"time"
)

// CertPair is a certificate and its key, in PEM.
type CertPair struct {
	Cert, Key []byte
	cert      *x509.Certificate
	key       crypto.Signer
}

// CertRequest is what a certificate says.
type CertRequest struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool // serverAuth (else clientAuth)
	Client       bool
}

const certLifetime = 365 * 24 * time.Hour

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126)) }

// NewCA makes a self-signed CA.
func NewCA(name string) (*CertPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(tmpl, tmpl, key, key)
}

// Issue signs a leaf certificate with the CA.
func (ca *CertPair) Issue(r CertRequest) (*CertPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: r.CommonName, Organization: r.Organization},
		DNSNames:     r.DNSNames,
		IPAddresses:  r.IPs,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if r.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if r.Client || !r.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	return sign(tmpl, ca.cert, key, ca.key)
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) (*CertPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CertPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  keyPEM, cert: cert, key: key,
	}, nil
}

// Write puts <dir>/<name>.crt and <name>.key in place (the key readable by root only).
func (p *CertPair) Write(dir, name string) error {
	if err := writeFile(filepath.Join(dir, name+".crt"), p.Cert, 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, name+".key"), p.Key, 0o600)
}

// PKI is the cluster's certificate authorities and the certificates every part presents.
type PKI struct {
	CA, FrontProxyCA *CertPair
	Dir              string
}

// NewPKI makes the CAs, the control plane's certificates and the service-account key in dir.
func NewPKI(c *Cluster) (*PKI, error) {
	p := &PKI{Dir: c.PKIDir()}
	var err error
	if p.CA, err = NewCA("kubernetes"); err != nil {
		return nil, err
	}
	if p.FrontProxyCA, err = NewCA("front-proxy-ca"); err != nil {
		return nil, err
	}
	if err := p.CA.Write(p.Dir, "ca"); err != nil {
		return nil, err
	}
	if err := p.FrontProxyCA.Write(p.Dir, "front-proxy-ca"); err != nil {
		return nil, err
	}
	apiserver, err := p.CA.Issue(CertRequest{
		CommonName: "kube-apiserver", Server: true,
		DNSNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc." + c.DNSDomain, "localhost", c.Node(0).Name},
		IPs: []net.IP{net.IP(c.KubernetesSvcIP().AsSlice()), net.IP(c.APIServerIP().AsSlice()),
			net.IPv4(127, 0, 0, 1)},
	})
	if err != nil {
		return nil, err
	}
	if err := apiserver.Write(p.Dir, "apiserver"); err != nil {
		return nil, err
	}
	// kubeadm's kubelet client is in a group bound to the kubelet API; system:masters is
	// allowed everything kubelet's webhook asks about, with no binding to create first.
	kubeletClient, err := p.CA.Issue(CertRequest{CommonName: "kube-apiserver-kubelet-client",
		Organization: []string{"system:masters"}})
	if err != nil {
		return nil, err
	}
	if err := kubeletClient.Write(p.Dir, "apiserver-kubelet-client"); err != nil {
		return nil, err
	}
	frontProxy, err := p.FrontProxyCA.Issue(CertRequest{CommonName: "front-proxy-client"})
	if err != nil {
		return nil, err
	}
	if err := frontProxy.Write(p.Dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	sa, err := newKey()
	if err != nil {
		return nil, err
	}
	saKey, err := encodeKey(sa)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(p.Dir, "sa.key"), saKey, 0o600); err != nil {
		return nil, err
	}
	return p, writeFile(filepath.Join(p.Dir, "sa.pub"),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

// Kubeconfig writes a kubeconfig for a client certificate of the cluster CA.
func (p *PKI) Kubeconfig(c *Cluster, path, user string, org ...string) error {
	client, err := p.CA.Issue(CertRequest{CommonName: user, Organization: org})
	if err != nil {
		return err
	}
	b, err := RenderKubeconfig(KubeconfigData{Cluster: "crust-" + c.Name, Server: c.APIServerURL(),
		User: user, CA: p.CA.Cert, Cert: client.Cert, Key: client.Key})
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

// NodeCerts writes a node's kubelet serving certificate (its name and address) and the
// kubeconfigs of its kubelet (system:node:<name>, the Node authorizer's) and kube-proxy.
func (p *PKI) NodeCerts(n *Node) error {
	serving, err := p.CA.Issue(CertRequest{CommonName: n.Name, Server: true,
		DNSNames: []string{n.Name}, IPs: []net.IP{net.IP(n.IP.AsSlice())}})
	if err != nil {
		return err
	}
	if err := writeFile(n.KubeletCert(), serving.Cert, 0o644); err != nil {
		return err
	}
	if err := writeFile(n.KubeletKey(), serving.Key, 0o600); err != nil {
		return err
	}
	if err := p.Kubeconfig(n.C, n.KubeletKubeconfig(), "system:node:"+n.Name, "system:nodes"); err != nil {
		return err
	}
	return p.Kubeconfig(n.C, n.KubeProxyKubeconfig(), "system:kube-proxy")
}
