package embedded_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

// TestAuthMatrix: send, receive, ack and route on a broker with access
// control, each with no credentials, a wrong secret, the right secret of a
// user without the permission, and the right secret of a user with it.
// Refusals are UNAUTHORIZED or FORBIDDEN and carry no data.
func TestAuthMatrix(t *testing.T) {
	_, b := oneBroker(t, func(o *embedded.Options) {
		o.Users = []embedded.User{
			{AccessKey: "writer", SecretKey: "writer-secret", Publish: []string{"plain"}},
			{AccessKey: "reader", SecretKey: "reader-secret", Subscribe: []string{"plain"}, Groups: []string{"g"}},
			{AccessKey: "stranger", SecretKey: "stranger-secret", Publish: []string{"elsewhere"}, Subscribe: []string{"elsewhere"}, Groups: []string{"other"}},
		}
	})
	ep := b.Endpoint()
	type creds struct {
		name string
		c    *driver.Credentials
		want error // nil: allowed
	}
	none := creds{"no credentials", nil, driver.ErrUnauthorized}
	wrong := func(ak string) creds {
		return creds{"wrong secret", &driver.Credentials{AccessKey: ak, SecretKey: "not-the-secret"}, driver.ErrUnauthorized}
	}
	check := func(t *testing.T, cr creds, err error) {
		t.Helper()
		if cr.want == nil {
			require.NoError(t, err, cr.name)
			return
		}
		require.Error(t, err, cr.name)
		require.True(t, errors.Is(err, cr.want), "%s: got %v, want %v", cr.name, err, cr.want)
	}
	withCreds := func(cr creds) func(*driver.Config) {
		return func(c *driver.Config) { c.Credentials = cr.c }
	}
	msg := func(id string) []*driver.Message {
		return []*driver.Message{{Topic: "plain", ID: id, Body: []byte("secret " + id), QueueID: driver.AnyQueue}}
	}

	t.Run("send", func(t *testing.T) {
		for _, cr := range []creds{none, wrong("writer"),
			{"no permission", &driver.Credentials{AccessKey: "reader", SecretKey: "reader-secret"}, driver.ErrForbidden},
			{"permission", &driver.Credentials{AccessKey: "writer", SecretKey: "writer-secret"}, nil},
		} {
			p := producerFor(t, []string{"plain"}, withCreds(cr))
			res, err := p.Send(featureCtx(t), ep, msg("send-"+cr.name))
			check(t, cr, err)
			if cr.want != nil {
				require.Nil(t, res)
			}
		}
	})

	writer := producerFor(t, []string{"plain"}, withCreds(creds{c: &driver.Credentials{AccessKey: "writer", SecretKey: "writer-secret"}}))
	_, err := writer.Send(featureCtx(t), ep, msg("for-readers"))
	require.NoError(t, err)
	reader := consumerFor(t, "plain", withCreds(creds{c: &driver.Credentials{AccessKey: "reader", SecretKey: "reader-secret"}}))
	route, err := reader.QueryRoute(featureCtx(t), ep, "plain")
	require.NoError(t, err)
	queues := route.ReadableQueues()
	require.NotEmpty(t, queues)

	t.Run("route", func(t *testing.T) {
		for _, cr := range []creds{none, wrong("reader"),
			{"no permission", &driver.Credentials{AccessKey: "stranger", SecretKey: "stranger-secret"}, driver.ErrForbidden},
			{"permission", &driver.Credentials{AccessKey: "writer", SecretKey: "writer-secret"}, nil},
		} {
			p := producerFor(t, []string{"plain"}, withCreds(cr))
			r, err := p.QueryRoute(featureCtx(t), ep, "plain")
			check(t, cr, err)
			if cr.want != nil {
				require.Nil(t, r)
			}
		}
	})

	receiveAll := func(c *driver.Client) ([]*driver.ReceivedMessage, error) {
		var out []*driver.ReceivedMessage
		for _, q := range queues {
			msgs, err := c.Receive(featureCtx(t), driver.ReceiveRequest{Queue: q, BatchSize: 32, InvisibleDuration: time.Minute,
				LongPollingTimeout: 50 * time.Millisecond})
			if err != nil {
				return out, err
			}
			out = append(out, msgs...)
		}
		return out, nil
	}
	t.Run("receive", func(t *testing.T) {
		for _, cr := range []creds{none, wrong("reader"),
			{"no permission", &driver.Credentials{AccessKey: "writer", SecretKey: "writer-secret"}, driver.ErrForbidden},
		} {
			c := consumerFor(t, "plain", withCreds(cr))
			msgs, err := receiveAll(c)
			check(t, cr, err)
			require.Empty(t, msgs, "%s: no data on a refusal", cr.name)
		}
		// With permission: both messages the writer sent are there.
		msgs, err := receiveAll(reader)
		require.NoError(t, err)
		var got []string
		for _, m := range msgs {
			got = append(got, m.ID)
		}
		require.ElementsMatch(t, []string{"send-permission", "for-readers"}, got)

		t.Run("ack", func(t *testing.T) {
			entry := []driver.AckEntry{{MessageID: msgs[0].ID, ReceiptHandle: msgs[0].ReceiptHandle}}
			for _, cr := range []creds{none, wrong("reader"),
				{"no permission", &driver.Credentials{AccessKey: "stranger", SecretKey: "stranger-secret"}, driver.ErrForbidden},
				{"permission", &driver.Credentials{AccessKey: "reader", SecretKey: "reader-secret"}, nil},
			} {
				c := consumerFor(t, "plain", withCreds(cr))
				errs, err := c.Ack(featureCtx(t), msgs[0].Endpoint, "plain", entry)
				if err == nil {
					err = errs[0]
				}
				check(t, cr, err)
			}
		})
	})
}

// TestTLS: brokers serving TLS with a certificate made here accept a
// client that trusts it and nothing in plaintext.
func TestTLS(t *testing.T) {
	server, client := selfSignedTLS(t)
	_, b := oneBroker(t, func(o *embedded.Options) { o.TLS = server })
	ep := b.Endpoint()
	p := producerFor(t, []string{"plain"}, func(c *driver.Config) { c.TLS = client })
	_, err := p.Send(featureCtx(t), ep, []*driver.Message{{Topic: "plain", ID: "over-tls", Body: []byte("x"), QueueID: driver.AnyQueue}})
	require.NoError(t, err)
	c := consumerFor(t, "plain", func(c *driver.Config) { c.TLS = client })
	got := drainTopic(t, c, ep, "plain", 500*time.Millisecond)
	require.Len(t, got["over-tls"], 1)

	plain := producerFor(t, []string{"plain"}, func(c *driver.Config) { c.RequestTimeout = time.Second })
	_, err = plain.Send(featureCtx(t), ep, []*driver.Message{{Topic: "plain", ID: "plaintext", Body: []byte("x"), QueueID: driver.AnyQueue}})
	require.Error(t, err)
}
