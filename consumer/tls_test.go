package consumer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/twinmq/twinmq/internal/pb/forwardpb"
	"github.com/twinmq/twinmq/lane"
)

// testPKI is a CA with one server and one client certificate.
type testPKI struct {
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "consumer"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{pool: pool, server: issue(2, x509.ExtKeyUsageServerAuth), client: issue(3, x509.ExtKeyUsageClientAuth)}
}

func (p *testPKI) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

func (p *testPKI) clientConfig(withCert bool) *tls.Config {
	c := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS13}
	if withCert {
		c.Certificates = []tls.Certificate{p.client}
	}
	return c
}

// TestForwardOverMutualTLS: consumers forward to each other over mutual
// TLS, and a caller with the token but without a client certificate is
// refused.
func TestForwardOverMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	reg := newRegistry(t)
	tlsOpt := WithForwardTLS(pki.serverConfig(), pki.clientConfig(true))
	handled := make(chan string, 1)
	origin, f := laneFake(t, reg, "", func(ctx context.Context, m *Message) error {
		t.Errorf("base must not handle %s", m.ID)
		return nil
	}, tlsOpt)
	target, _ := laneFake(t, reg, "a", func(ctx context.Context, m *Message) error {
		handled <- m.ID
		return nil
	}, tlsOpt)
	waitLanes(t, origin, "", "a")

	m := msg("over-tls")
	m.Properties = map[string]string{lane.PropertyLane: "a"}
	f.push(m)
	select {
	case id := <-handled:
		assert.Equal(t, "over-tls", id)
	case <-time.After(waitLong):
		t.Fatal("the forwarded message was not handled")
	}
	f.waitSettled(t, 1)

	cc, err := grpc.NewClient(target.ForwardAddr(), grpc.WithTransportCredentials(credentials.NewTLS(pki.clientConfig(false))))
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, ForwardTokenHeader, testToken)
	_, err = forwardpb.NewForwarderClient(cc).Deliver(ctx, &forwardpb.DeliverRequest{Group: "g", Lane: "a",
		Message: &forwardpb.ForwardedMessage{Topic: "t", MessageId: "x", Body: []byte("x")}})
	require.Error(t, err, "a caller without a client certificate must be refused")
}
