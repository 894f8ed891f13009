package driver

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func grpcStatusUnavailable(msg string) error { return status.Error(codes.Unavailable, msg) }

func TestSignMatchesProtocolFormat(t *testing.T) {
	// Signature computed independently: HMAC-SHA1("secret-key", "20261122T001500Z").
	got := Sign(Credentials{AccessKey: "AK1", SecretKey: "secret-key"}, "20261122T001500Z")
	assert.Equal(t, "MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=x-mq-date-time, "+
		"Signature=BA8FE31D76C8FCAE9AFB6860CE4398BB27AFDC77", got)
}

func TestNewClientIDShape(t *testing.T) {
	re := regexp.MustCompile(`^[^@]+@\d+@\d+@[0-9a-z]+$`)
	a, b := NewClientID(), NewClientID()
	assert.Regexp(t, re, a)
	assert.NotEqual(t, a, b)
}

func TestHeadersCarryEverythingAndSignPerSecond(t *testing.T) {
	h := newHeaders("host@1@2@abc", "ns1", &Credentials{AccessKey: "AK", SecretKey: "SK"})
	now := time.Date(2026, 11, 22, 0, 15, 0, 0, time.UTC)
	md := h.metadataAt(now)
	assert.Equal(t, []string{"host@1@2@abc"}, md.Get("x-mq-client-id"))
	assert.Equal(t, []string{"GO"}, md.Get("x-mq-language"))
	assert.Equal(t, []string{"v2"}, md.Get("x-mq-protocol"))
	assert.Equal(t, []string{ClientVersion}, md.Get("x-mq-client-version"))
	assert.Equal(t, []string{"ns1"}, md.Get("x-mq-namespace"))
	assert.Equal(t, []string{"20261122T001500Z"}, md.Get("x-mq-date-time"))
	assert.Equal(t, []string{Sign(Credentials{AccessKey: "AK", SecretKey: "SK"}, "20261122T001500Z")}, md.Get("authorization"))

	// Same second: the very same (shared) metadata; next second: a new one.
	md2 := h.metadataAt(now.Add(500 * time.Millisecond))
	assert.Equal(t, md, md2)
	md3 := h.metadataAt(now.Add(time.Second))
	assert.Equal(t, []string{"20261122T001501Z"}, md3.Get("x-mq-date-time"))
	assert.Equal(t, []string{"20261122T001500Z"}, md.Get("x-mq-date-time"), "published metadata must never change")

	// Per call: request ids differ.
	c1, _ := metadata.FromOutgoingContext(h.outgoing(context.Background()))
	c2, _ := metadata.FromOutgoingContext(h.outgoing(context.Background()))
	require.Len(t, c1.Get("x-mq-request-id"), 1)
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, c1.Get("x-mq-request-id")[0])
	assert.NotEqual(t, c1.Get("x-mq-request-id"), c2.Get("x-mq-request-id"))
}

func TestHeadersWithoutCredentialsHaveNoAuthorization(t *testing.T) {
	h := newHeaders("id", "", nil)
	md := h.metadataAt(time.Now())
	assert.Empty(t, md.Get("authorization"))
	assert.Empty(t, md.Get("x-mq-namespace"))
}

func TestParseEndpointSetsScheme(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8081":   "IPv4",
		"[::1]:8081":       "IPv6",
		"broker-1.dc:8081": "DOMAIN_NAME",
	} {
		ep, err := parseEndpoint(addr)
		require.NoError(t, err, addr)
		assert.Equal(t, want, ep.Scheme.String(), addr)
		assert.Len(t, ep.Addresses, 1)
	}
	for _, bad := range []string{"", "nohost", ":8081", "h:0", "h:70000", "h:x"} {
		_, err := parseEndpoint(bad)
		assert.Error(t, err, bad)
	}
}
