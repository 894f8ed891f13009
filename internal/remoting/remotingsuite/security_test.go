package remotingsuite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/remoting"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/internal/testpki"
	"github.com/twinmq/twinmq/rmqerr"
)

const secTopic = "remoting_secure"

// startSecure starts one embedded broker with TLS and access control:
// user "pub" may send to secTopic, user "other" to nothing.
func startSecure(t *testing.T, pki *testpki.Server) *embedded.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 1, BrokersPerCluster: 1,
		Topics: []embedded.Topic{{Name: secTopic, Queues: 2}},
		TLS:    pki.ServerConfig(),
		Users: []embedded.User{
			{AccessKey: "pub", SecretKey: "pub-secret", Publish: []string{secTopic}},
			{AccessKey: "other", SecretKey: "other-secret"},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, env.Close(ctx))
	})
	return env
}

// sendOne looks the topic up through the name server and sends one
// message with a client of opts.
func sendOne(t *testing.T, env *embedded.Env, opts ...remoting.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := remoting.New(append([]remoting.Option{remoting.WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)...)
	defer c.Close()
	ns, err := remoting.NewNameServer(c, []string{env.NameServer()})
	require.NoError(t, err)
	r, err := ns.Route(ctx, secTopic)
	if err != nil {
		return err
	}
	q := r.WriteQueues()[0]
	_, err = c.Send(ctx, remoting.NewIDGenerator(), remoting.SendTarget{Addr: q.Addr, BrokerName: q.BrokerName, QueueID: q.QueueID, ProducerGroup: "sec"},
		&remoting.Message{Topic: secTopic, Body: []byte("signed")})
	return err
}

// TestTLSAndSignature: against brokers serving TLS with access control, a
// TLS client with a user's credentials sends (in both header
// serializations, oneway heartbeats signed too); a plaintext client cannot
// connect (unavailable); a client without credentials, with a wrong
// secret, an unknown access key or a user without the permission is
// refused with the forbidden class (NO_PERMISSION, as RocketMQ answers).
func TestTLSAndSignature(t *testing.T) {
	pki := testpki.NewServer(t)
	env := startSecure(t, pki)
	tlsOpt := remoting.WithTLS(pki.ClientConfig())

	for _, st := range []wire.SerializeType{wire.JSON, wire.RocketMQ} {
		require.NoError(t, sendOne(t, env, tlsOpt, remoting.WithSerializeType(st), remoting.WithCredentials("pub", "pub-secret")))
	}
	// A security token is signed with the rest.
	require.NoError(t, sendOne(t, env, tlsOpt, remoting.WithCredentials("pub", "pub-secret"), remoting.WithSecurityToken("tok")))

	err := sendOne(t, env, remoting.WithCredentials("pub", "pub-secret"))
	require.ErrorIs(t, err, rmqerr.ErrUnavailable, "plaintext to a TLS port: %v", err)

	for name, opt := range map[string]remoting.Option{
		"no credentials": remoting.WithCredentials("", ""),
		"wrong secret":   remoting.WithCredentials("pub", "pub-secretx"),
		"unknown key":    remoting.WithCredentials("nobody", "pub-secret"),
		"no permission":  remoting.WithCredentials("other", "other-secret"),
	} {
		err := sendOne(t, env, tlsOpt, opt)
		require.Error(t, err, name)
		require.ErrorIs(t, err, rmqerr.ErrForbidden, "%s: %v", name, err)
		var re *remoting.ResponseError
		require.ErrorAs(t, err, &re, name)
		require.Equal(t, wire.RespNoPermission, re.Code, name)
	}
}

// TestSignedHeartbeatAndOneway: heartbeats (request/response) and the
// oneway END_TRANSACTION carry a valid signature: the broker with access
// control answers the heartbeat, and refuses an unsigned one.
func TestSignedHeartbeat(t *testing.T) {
	pki := testpki.NewServer(t)
	env := startSecure(t, pki)
	addr := env.Clusters()[0].Brokers()[0].RemotingEndpoint()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	signed := remoting.New(remoting.WithTLS(pki.ClientConfig()), remoting.WithCredentials("other", "other-secret"))
	defer signed.Close()
	require.NoError(t, signed.Heartbeat(ctx, addr, "client-1", []string{"sec"}))
	unsigned := remoting.New(remoting.WithTLS(pki.ClientConfig()))
	defer unsigned.Close()
	require.ErrorIs(t, unsigned.Heartbeat(ctx, addr, "client-2", []string{"sec"}), rmqerr.ErrForbidden)
}
