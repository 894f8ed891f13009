//go:build interop

package interop

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
)

// TestInteropSignedSend: against a peer with authentication on, the
// driver's signed calls are accepted and unsigned or wrongly signed ones
// are refused with UNAUTHORIZED.
func TestInteropSignedSend(t *testing.T) {
	ep := os.Getenv("TWINMQ_INTEROP_AUTH_ENDPOINT")
	if ep == "" {
		t.Fatal("TWINMQ_INTEROP_AUTH_ENDPOINT is not set: run the suite with `make interop` (the second, authenticating peer)")
	}
	ak, sk := os.Getenv("TWINMQ_INTEROP_ACCESS_KEY"), os.Getenv("TWINMQ_INTEROP_SECRET_KEY")
	require.NotEmpty(t, ak)
	const topic = "interop_auth"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(cred *driver.Credentials) error {
		p := featureClient(t, driver.Config{Type: driver.Producer, Topics: []string{topic}, Credentials: cred, RequestTimeout: 5 * time.Second})
		_, err := p.Send(ctx, ep, []*driver.Message{{Topic: topic, Body: []byte("signed"), QueueID: driver.AnyQueue}})
		return err
	}
	require.NoError(t, send(&driver.Credentials{AccessKey: ak, SecretKey: sk}))
	for name, cred := range map[string]*driver.Credentials{
		"no credentials": nil,
		"wrong secret":   {AccessKey: ak, SecretKey: sk + "x"},
		"unknown user":   {AccessKey: ak + "x", SecretKey: sk},
	} {
		err := send(cred)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, driver.ErrUnauthorized), "%s: %v", name, err)
	}
}
