package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/testpki"
)

// selfSigned makes a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	s := testpki.NewServer(t)
	return s.Cert, s.Pool
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	f := &fakeServer{headers: map[string][]metadata.MD{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = lis.Addr().String()
	f.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	rmqpb.RegisterMessagingServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(lis) }()
	t.Cleanup(f.srv.Stop)

	c := newTestClient(t, Config{Type: Producer, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	_, err = c.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("secret")}})
	require.NoError(t, err)

	// A plaintext client cannot talk to the TLS server.
	plain := newTestClient(t, producerConfig())
	_, err = plain.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("x")}})
	assert.ErrorIs(t, err, ErrUnavailable)
}

func TestMetricsShareARegisterer(t *testing.T) {
	f := startFake(t, nil)
	reg := prometheus.NewRegistry()
	a := newTestClient(t, Config{Type: Producer, Registerer: reg})
	b := newTestClient(t, Config{Type: Producer, Registerer: reg})
	for _, c := range []*Client{a, b} {
		_, err := c.Send(ctxT(t), f.addr, []*Message{{Topic: "orders", Body: []byte("x")}})
		require.NoError(t, err)
	}
	// One collector, a series per client.
	assert.Equal(t, 1.0, testutil.ToFloat64(a.met.calls.WithLabelValues("SendMessage", "ok")))
	assert.Equal(t, 1.0, testutil.ToFloat64(b.met.calls.WithLabelValues("SendMessage", "ok")))
	assert.Equal(t, 2, testutil.CollectAndCount(reg, "twinmq_driver_rpc_total"))
	_, err := a.QueryRoute(ctxT(t), f.addr, "")
	assert.ErrorIs(t, err, ErrBadRequest)
}

func TestReceiveFitsTheCallersDeadline(t *testing.T) {
	f := startFake(t, nil)
	c := newTestClient(t, consumerConfig())
	require.NoError(t, c.Connect(ctxT(t), f.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := Queue{Topic: "orders", Broker: "broker-a", Endpoint: f.addr, Permission: PermReadWrite}
	_, err := c.Receive(ctx, ReceiveRequest{Queue: q, InvisibleDuration: 15 * time.Second, LongPollingTimeout: 20 * time.Second})
	require.NoError(t, err)
	got := f.receives[0].GetLongPollingTimeout().AsDuration()
	assert.LessOrEqual(t, got, 2500*time.Millisecond, "5 s left: poll for at most half, leaving the request timeout")
	assert.Greater(t, got, time.Second)
}
