package clientopt

import (
	"crypto/tls"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/config"
)

var errInvalid = errors.New("invalid")

func TestNormalize(t *testing.T) {
	var none Common
	require.ErrorIs(t, none.Normalize(errInvalid), errInvalid, "no configuration")

	var two Common
	Config(config.Default())(&two)
	Source(config.Static(config.Default()))(&two)
	require.ErrorIs(t, two.Normalize(errInvalid), errInvalid, "two configurations")

	var c Common
	Config(config.Default())(&c)
	DialOptions(grpc.WithUserAgent("a"))(&c)
	DialOptions(grpc.WithUserAgent("b"))(&c)
	require.NoError(t, c.Normalize(errInvalid))
	assert.NotNil(t, c.Logger)
	assert.Equal(t, uint16(tls.VersionTLS12), c.TLS.MinVersion)
	assert.NotEmpty(t, c.Instance)
	assert.Len(t, c.DialOptions, 2, "dial options add up")

	var named Common
	Watcher(&config.Watcher{})(&named)
	Instance("svc-1")(&named)
	require.NoError(t, named.Normalize(errInvalid))
	assert.Equal(t, "svc-1", named.Instance)
}
