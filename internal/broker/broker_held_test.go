package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/broker/auth"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/testpki"
)

func delayedMsg(topic, id string, at time.Time) *rmqpb.Message {
	m := msg(topic, id, "body "+id)
	m.SystemProperties.MessageType = rmqpb.MessageType_DELAY
	m.SystemProperties.DeliveryTimestamp = timestamppb.New(at)
	return m
}

func txMsg(topic, id string) *rmqpb.Message {
	m := msg(topic, id, "body "+id)
	m.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
	return m
}

func (c *tclient) end(topic, id, txID string, r rmqpb.TransactionResolution) *rmqpb.EndTransactionResponse {
	c.t.Helper()
	ctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	resp, err := c.rpc.EndTransaction(ctx, &rmqpb.EndTransactionRequest{Topic: res(topic), MessageId: id, TransactionId: txID,
		Resolution: r, Source: rmqpb.TransactionSource_SOURCE_CLIENT})
	require.NoError(c.t, err)
	return resp
}

// TestDelayedMessageThroughTimer: a single delayed message is invisible
// until its time, then delivered once with its delivery time, also across a
// broker restart while it waits.
func TestDelayedMessageThroughTimer(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	b, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.Start(ctx))
	c := dial(t, b.Addr(), "delay-client")
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	resp := c.send(delayedMsg("delay", "d1", at))
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	require.Len(t, resp.GetEntries(), 1)
	require.Equal(t, "d1", resp.GetEntries()[0].GetMessageId())
	r := c.receive("g1", "delay", 32, 10*time.Second, 100*time.Millisecond)
	require.Empty(t, r.messages, "delivered before its time")

	// Restart while it waits.
	require.NoError(t, b.Close(ctx))
	b2 := startBroker(t, cfg)
	c2 := dial(t, b2.Addr(), "delay-client")
	got := c2.drain("g1", "delay", 1, 10*time.Second)
	require.Len(t, got, 1)
	require.False(t, time.Now().Before(at), "delivered before its time")
	sp := got[0].GetSystemProperties()
	require.Equal(t, "d1", sp.GetMessageId())
	require.Equal(t, at.UnixMilli(), sp.GetDeliveryTimestamp().AsTime().UnixMilli())
	require.Equal(t, rmqpb.MessageType_DELAY, sp.GetMessageType())
	require.Empty(t, c2.drain("g1", "delay", 1, 500*time.Millisecond), "delivered twice")

	// Too far ahead: the proxy's one day.
	resp = c2.send(delayedMsg("delay", "d2", time.Now().Add(25*time.Hour)))
	require.Equal(t, rmqpb.Code_ILLEGAL_DELIVERY_TIME, resp.GetStatus().GetCode())
}

func TestTransactionCommitAndRollback(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "tx-client")
	commit := c.send(txMsg("tx", "t-commit"))
	require.Equal(t, rmqpb.Code_OK, commit.GetStatus().GetCode(), commit.GetStatus().GetMessage())
	txID := commit.GetEntries()[0].GetTransactionId()
	require.NotEmpty(t, txID)
	roll := c.send(txMsg("tx", "t-roll"))
	require.Equal(t, rmqpb.Code_OK, roll.GetStatus().GetCode())
	require.Empty(t, c.receive("g1", "tx", 32, 10*time.Second, 100*time.Millisecond).messages, "half messages are invisible")

	require.Equal(t, rmqpb.Code_OK, c.end("tx", "t-commit", txID, rmqpb.TransactionResolution_COMMIT).GetStatus().GetCode())
	require.Equal(t, rmqpb.Code_OK, c.end("tx", "t-roll", roll.GetEntries()[0].GetTransactionId(), rmqpb.TransactionResolution_ROLLBACK).GetStatus().GetCode())
	// A retried commit is fine; a bad id is not.
	require.Equal(t, rmqpb.Code_OK, c.end("tx", "t-commit", txID, rmqpb.TransactionResolution_COMMIT).GetStatus().GetCode())
	require.Equal(t, rmqpb.Code_INVALID_TRANSACTION_ID, c.end("tx", "t-commit", "", rmqpb.TransactionResolution_COMMIT).GetStatus().GetCode())
	require.Equal(t, rmqpb.Code_INVALID_TRANSACTION_ID, c.end("tx", "t-commit", "nope", rmqpb.TransactionResolution_COMMIT).GetStatus().GetCode())
	require.Equal(t, rmqpb.Code_INVALID_TRANSACTION_ID, c.end("tx", "other-id", roll.GetEntries()[0].GetTransactionId(), rmqpb.TransactionResolution_COMMIT).GetStatus().GetCode())

	got := c.drain("g1", "tx", 2, 2*time.Second)
	require.Equal(t, []string{"t-commit"}, ids(got))
	require.Equal(t, rmqpb.MessageType_TRANSACTION, got[0].GetSystemProperties().GetMessageType())
	require.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, c.send(txMsg("tx", "b1"), txMsg("tx", "b2")).GetStatus().GetCode(), "transactional batch")
}

// TestOrphanCheckedBackOnTelemetry: a transaction nobody ends is checked
// back on the Telemetry stream of a live producer of its topic, whose
// EndTransaction answer commits it.
func TestOrphanCheckedBackOnTelemetry(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Transactions = TransactionOptions{Timeout: 100 * time.Millisecond, CheckInterval: 100 * time.Millisecond}
	b := startBroker(t, cfg)
	sender := dial(t, b.Addr(), "dead-producer")
	resp := sender.send(txMsg("tx", "orphan"))
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())

	p := dial(t, b.Addr(), "live-producer")
	ctx, cancel := p.ctx(20 * time.Second)
	defer cancel()
	stream, err := p.rpc.Telemetry(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: rmqpb.ClientType_PRODUCER.Enum(),
		PubSub:     &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("tx")}}},
	}}}))
	var check *rmqpb.RecoverOrphanedTransactionCommand
	for check == nil {
		cmd, err := stream.Recv()
		require.NoError(t, err)
		check = cmd.GetRecoverOrphanedTransactionCommand()
	}
	require.Equal(t, resp.GetEntries()[0].GetTransactionId(), check.GetTransactionId())
	require.Equal(t, "orphan", check.GetMessage().GetSystemProperties().GetMessageId())
	require.Equal(t, "tx", check.GetMessage().GetTopic().GetName())
	require.Equal(t, []byte("body orphan"), check.GetMessage().GetBody())
	ctxEnd, cancelEnd := p.ctx(5 * time.Second)
	defer cancelEnd()
	end, err := p.rpc.EndTransaction(ctxEnd, &rmqpb.EndTransactionRequest{Topic: res("tx"), MessageId: "orphan",
		TransactionId: check.GetTransactionId(), Resolution: rmqpb.TransactionResolution_COMMIT, Source: rmqpb.TransactionSource_SOURCE_SERVER_CHECK})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, end.GetStatus().GetCode())
	require.Equal(t, []string{"orphan"}, ids(p.drain("g1", "tx", 1, 5*time.Second)))
}

// selfSigned makes a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	s := testpki.NewServer(t)
	return s.Cert, s.Pool
}

func TestTLSAndAuth(t *testing.T) {
	cert, pool := selfSigned(t)
	cfg := testConfig(t, t.TempDir())
	cfg.Security = Security{
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Auth: &auth.Config{Users: []auth.User{
			{AccessKey: "writer", SecretKey: "w-secret", Publish: []string{"normal"}},
		}},
	}
	b := startBroker(t, cfg)
	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	require.NoError(t, err)
	defer conn.Close()
	c := &tclient{t: t, id: "tls-client", conn: conn, rpc: rmqpb.NewMessagingServiceClient(conn)}
	// Anonymous: refused in the body.
	require.Equal(t, rmqpb.Code_UNAUTHORIZED, c.send(msg("normal", "a1", "x")).GetStatus().GetCode())
	signed := func(ak, sk, topic string) rmqpb.Code {
		ctx, cancel := c.ctx(5 * time.Second)
		defer cancel()
		dt := time.Now().UTC().Format("20060102T150405Z")
		ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-date-time", dt, "authorization", auth.FormatAuthorization(ak, sk, dt))
		resp, err := c.rpc.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg(topic, "a2", "x")}})
		require.NoError(t, err)
		return resp.GetStatus().GetCode()
	}
	require.Equal(t, rmqpb.Code_UNAUTHORIZED, signed("writer", "wrong", "normal"))
	require.Equal(t, rmqpb.Code_OK, signed("writer", "w-secret", "normal"))
	// The ACL reads the topic of the broker's own decoding of the send.
	require.Equal(t, rmqpb.Code_FORBIDDEN, signed("writer", "w-secret", "mixed"))

	// A plaintext client gets no answer at all.
	plain := dial(t, b.Addr(), "plain")
	ctx, cancel := plain.ctx(2 * time.Second)
	defer cancel()
	_, err = plain.rpc.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("normal")})
	require.Error(t, err)
}

var _ = durationpb.New
