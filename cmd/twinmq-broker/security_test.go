package main

import (
	"context"
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
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/twinmq/twinmq/internal/broker/auth"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its
// key as PEM files, and returns a pool trusting it.
func writeCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "twinmq-broker test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLSAndUsersFromConfig(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := writeCert(t, dir)
	cfgJSON := `{
	  "cluster": "c1", "dataDir": "` + filepath.Join(dir, "data") + `",
	  "brokers": [{"name": "b0", "listen": "127.0.0.1:0"}],
	  "topics": [{"name": "orders", "queues": 2, "type": "TRANSACTION"}],
	  "tls": {"certFile": "` + certFile + `", "keyFile": "` + keyFile + `"},
	  "users": [{"accessKey": "app", "secretKey": "app-secret", "publish": ["orders"]}],
	  "transactions": {"timeout": "2s", "checkInterval": "10s", "maxChecks": 3}
	}`
	fc, err := loadConfig(strings.NewReader(cfgJSON))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan []string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, fc, zap.NewNop(), func(a []string) { addrs <- a }) }()
	var eps []string
	select {
	case eps = <-addrs:
	case err := <-done:
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(eps[0], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	require.NoError(t, err)
	defer conn.Close()
	route := func(signed bool) rmqpb.Code {
		md := metadata.Pairs("x-mq-client-id", "cmd-tls-test")
		if signed {
			dt := time.Now().UTC().Format("20060102T150405Z")
			md.Append("x-mq-date-time", dt)
			md.Append("authorization", auth.FormatAuthorization("app", "app-secret", dt))
		}
		rctx, rcancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 5*time.Second)
		defer rcancel()
		resp, err := rmqpb.NewMessagingServiceClient(conn).QueryRoute(rctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: "orders"}})
		require.NoError(t, err)
		return resp.GetStatus().GetCode()
	}
	require.Equal(t, rmqpb.Code_UNAUTHORIZED, route(false))
	require.Equal(t, rmqpb.Code_OK, route(true))
	cancel()
	require.NoError(t, <-done)
}

func TestBadSecurityConfigs(t *testing.T) {
	for name, js := range map[string]string{
		"missing cert": `{"dataDir": "x", "brokers": [{"name": "b"}], "tls": {"certFile": "/nonexistent", "keyFile": "/nonexistent"}}`,
		"bad user":     `{"dataDir": "x", "brokers": [{"name": "b"}], "users": [{"accessKey": "a"}]}`,
		"bad duration": `{"dataDir": "x", "brokers": [{"name": "b"}], "transactions": {"timeout": "soon"}}`,
	} {
		fc, err := loadConfig(strings.NewReader(js))
		require.NoError(t, err, name)
		_, err = fc.brokerConfigs(zap.NewNop(), nil)
		require.ErrorIs(t, err, errConfig, name)
	}
}
