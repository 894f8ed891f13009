package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/twinmq/twinmq/internal/testpki"
)

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its
// key as PEM files, and returns a pool trusting it.
func writeCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	s := testpki.NewServer(t)
	certFile, keyFile = s.WritePEM(t, dir)
	return certFile, keyFile, s.Pool
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
