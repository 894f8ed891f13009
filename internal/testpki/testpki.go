// Package testpki makes throwaway TLS material for tests: a self-signed
// server certificate for 127.0.0.1 and a pool that trusts it. It is test
// support only (like net/http/httptest), imports nothing of this module, and
// keeps no state: every call makes a fresh key.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Server is a self-signed server certificate for 127.0.0.1, valid for an
// hour either side of now.
type Server struct {
	Cert tls.Certificate // the certificate with its private key
	Pool *x509.CertPool  // a pool that trusts Cert
	der  []byte
	key  *ecdsa.PrivateKey
}

// NewServer makes a fresh Server; it fails the test on error.
func NewServer(t testing.TB) *Server {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testpki: key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "twinmq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testpki: certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testpki: parse: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &Server{Cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, Pool: pool, der: der, key: key}
}

// ServerConfig is a TLS config serving the certificate.
func (s *Server) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.Cert}, MinVersion: tls.VersionTLS12}
}

// ClientConfig is a TLS config that trusts the certificate.
func (s *Server) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: s.Pool, MinVersion: tls.VersionTLS12}
}

// WritePEM writes the certificate and its key as PEM files in dir and
// returns their paths.
func (s *Server) WritePEM(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(s.key)
	if err != nil {
		t.Fatalf("testpki: key: %v", err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.der}), 0o600); err != nil {
		t.Fatalf("testpki: %v", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatalf("testpki: %v", err)
	}
	return certFile, keyFile
}
