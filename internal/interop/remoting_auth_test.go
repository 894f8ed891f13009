//go:build interop

package interop

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// remotingSendVia looks topic up through the name server and sends one
// message, then a batch of three, to the first write queue, with a client
// of opts; it returns the first error.
func remotingSendVia(t *testing.T, namesrv, topic string, opts ...remoting.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := remoting.New(append([]remoting.Option{remoting.WithBackoff(10*time.Millisecond, 100*time.Millisecond)}, opts...)...)
	defer c.Close()
	ns, err := remoting.NewNameServer(c, []string{namesrv})
	require.NoError(t, err)
	r, err := ns.Route(ctx, topic)
	if err != nil {
		return err
	}
	qs := r.WriteQueues()
	require.NotEmpty(t, qs, "topic %s has no write queue", topic)
	q := qs[0]
	target := remoting.SendTarget{Addr: q.Addr, BrokerName: q.BrokerName, QueueID: q.QueueID, ProducerGroup: "twinmq_remoting_auth"}
	ids := remoting.NewIDGenerator()
	if _, err := c.Send(ctx, ids, target, &remoting.Message{Topic: topic, Body: []byte("signed single"), Tag: "a"}); err != nil {
		return err
	}
	batch := []*remoting.Message{{Topic: topic, Body: []byte("one")}, {Topic: topic, Body: []byte("two")}, {Topic: topic, Body: make([]byte, 4096)}}
	_, err = c.SendBatch(ctx, ids, target, batch)
	return err
}

// TestInteropRemotingSignedSend: RocketMQ 5.4.0's broker with ACL 2.0
// (the auth peer, cluster AuthCluster) accepts the classic remoting
// signature of the remoting client, on a single send and on a batch (the
// body is signed too), with either header serialization, and refuses a
// client without credentials, with a wrong secret or with an unknown
// access key: NO_PERMISSION, the forbidden class.
func TestInteropRemotingSignedSend(t *testing.T) {
	namesrv := os.Getenv("TWINMQ_INTEROP_NAMESRV")
	if namesrv == "" {
		t.Fatal("TWINMQ_INTEROP_NAMESRV is not set: run the suite with `make interop`")
	}
	ak, sk := os.Getenv("TWINMQ_INTEROP_ACCESS_KEY"), os.Getenv("TWINMQ_INTEROP_SECRET_KEY")
	require.NotEmpty(t, ak)
	const topic = "interop_auth"
	for _, st := range []wire.SerializeType{wire.JSON, wire.RocketMQ} {
		require.NoError(t, remotingSendVia(t, namesrv, topic, remoting.WithSerializeType(st), remoting.WithCredentials(ak, sk)), "serialization %d", st)
	}
	for name, opt := range map[string]remoting.Option{
		"no credentials": remoting.WithCredentials("", ""),
		"wrong secret":   remoting.WithCredentials(ak, sk+"x"),
		"unknown key":    remoting.WithCredentials(ak+"x", sk),
	} {
		err := remotingSendVia(t, namesrv, topic, opt)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, rmqerr.ErrForbidden), "%s: %v", name, err)
		var re *remoting.ResponseError
		require.ErrorAs(t, err, &re, name)
		require.Equal(t, wire.RespNoPermission, re.Code, name)
	}
}

// TestInteropRemotingBinaryHeaderRequest: RocketMQ 5.4.0's name server
// accepts a request whose header is in the binary ("ROCKETMQ") form; it
// answers in its own configured serialization (JSON by default: Java's
// servers do not follow the request's), which the client reads as well.
// (The signed sends above went to the broker in both forms.)
func TestInteropRemotingBinaryHeaderRequest(t *testing.T) {
	namesrv := os.Getenv("TWINMQ_INTEROP_NAMESRV")
	require.NotEmpty(t, namesrv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := remoting.New(remoting.WithSerializeType(wire.RocketMQ))
	defer c.Close()
	resp, err := c.Invoke(ctx, namesrv, &wire.Header{Code: wire.CodeGetRouteInfoByTopic, Ext: map[string]string{"topic": "interop_normal"}}, nil)
	require.NoError(t, err)
	require.NoError(t, remoting.CheckResponse(namesrv, resp))
	require.NotEmpty(t, resp.Body, "a route")
	t.Logf("the name server answered a binary-header request in serialization %d (0 JSON, 1 ROCKETMQ)", resp.Serialize)
}

// TestInteropRemotingTLS: RocketMQ's name server and broker run with
// tlsMode permissive by default, serving TLS (their test certificate,
// self-signed, hence no verification here) and plaintext on one port; the
// client's route lookup and sends work over TLS.
func TestInteropRemotingTLS(t *testing.T) {
	namesrv := os.Getenv("TWINMQ_INTEROP_NAMESRV")
	require.NotEmpty(t, namesrv)
	require.NoError(t, remotingSendVia(t, namesrv, "interop_normal",
		remoting.WithTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}))) //nolint:gosec // the peer's self-signed test certificate
}
