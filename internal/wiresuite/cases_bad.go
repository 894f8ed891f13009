package wiresuite

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// raw is a bare protocol client for requests the driver refuses to build.
// It sends the headers every server requires, nothing else; SendMessage
// needs no Settings handshake.
type raw struct {
	svc      rmqpb.MessagingServiceClient
	clientID string
}

func (s *suite) raw(t *testing.T) *raw {
	t.Helper()
	conn, err := grpc.NewClient(s.b.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &raw{svc: rmqpb.NewMessagingServiceClient(conn), clientID: driver.NewClientID()}
}

func (r *raw) ctx(ctx context.Context) context.Context {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return metadata.AppendToOutgoingContext(ctx,
		"x-mq-client-id", r.clientID,
		"x-mq-language", "GO",
		"x-mq-protocol", "v2",
		"x-mq-client-version", driver.ClientVersion,
		"x-mq-request-id", hex.EncodeToString(id[:]),
		"x-mq-date-time", time.Now().UTC().Format("20060102T150405Z"),
	)
}

// send sends msgs raw and returns the top-level status.
func (r *raw) send(ctx context.Context, t *testing.T, msgs ...*rmqpb.Message) *rmqpb.Status {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.svc.SendMessage(r.ctx(cctx), &rmqpb.SendMessageRequest{Messages: msgs})
	require.NoError(t, err, "a bad send is answered in the body, not with a gRPC error")
	require.NotNil(t, resp.GetStatus())
	return resp.GetStatus()
}

// rawMessage is a well-formed message of topic that mutate then spoils.
func rawMessage(topic string, mutate func(*rmqpb.Message)) *rmqpb.Message {
	m := &rmqpb.Message{
		Topic: &rmqpb.Resource{Name: topic},
		SystemProperties: &rmqpb.SystemProperties{
			MessageId:     driver.NewMessageIDGenerator().Next(),
			BodyEncoding:  rmqpb.Encoding_IDENTITY,
			MessageType:   rmqpb.MessageType_NORMAL,
			BornTimestamp: timestamppb.Now(),
			BornHost:      "wiresuite-host",
		},
		Body: []byte("raw"),
	}
	if mutate != nil {
		mutate(m)
	}
	return m
}

// testBadInputs: every bad request gets the protocol's status code, the
// same on every backend, and a well-formed request still works afterwards.
func (s *suite) testBadInputs(t *testing.T) {
	ctx := s.ctx(t, 2*time.Minute)
	r := s.raw(t)
	p := s.producer(t, TopicSend)
	route := s.route(ctx, t, p, TopicSend)
	q := route.WritableQueues()[0]

	rawCases := []struct {
		name string
		want rmqpb.Code
		msgs []*rmqpb.Message
	}{
		{"EmptyBody", rmqpb.Code_MESSAGE_BODY_EMPTY,
			[]*rmqpb.Message{rawMessage(TopicSend, func(m *rmqpb.Message) { m.Body = nil })}},
		{"OversizedBody", rmqpb.Code_MESSAGE_BODY_TOO_LARGE,
			[]*rmqpb.Message{rawMessage(TopicSend, func(m *rmqpb.Message) { m.Body = bytes.Repeat([]byte{'x'}, maxBody+1) })}},
		{"BlankMessageID", rmqpb.Code_ILLEGAL_MESSAGE_ID,
			[]*rmqpb.Message{rawMessage(TopicSend, func(m *rmqpb.Message) { m.SystemProperties.MessageId = "" })}},
		{"IllegalTopicRaw", rmqpb.Code_ILLEGAL_TOPIC,
			[]*rmqpb.Message{rawMessage("wire bad topic!", nil)}},
		{"NoMessages", rmqpb.Code_MESSAGE_CORRUPTED, nil},
		{"MixedTopics", rmqpb.Code_MESSAGE_CORRUPTED,
			[]*rmqpb.Message{rawMessage(TopicSend, nil), rawMessage(TopicBatch, nil)}},
	}
	for _, tc := range rawCases {
		t.Run(tc.name, func(t *testing.T) {
			st := r.send(ctx, t, tc.msgs...)
			require.Equal(t, tc.want.String(), st.GetCode().String(), "%s: %s", s.b.Name, st.GetMessage())
		})
	}

	send := func(m *driver.Message) error {
		if m.Body == nil {
			m.Body = []byte("bad input")
		}
		_, err := p.Send(ctx, q.Endpoint, []*driver.Message{m})
		return err
	}
	t.Run("IllegalTopic", func(t *testing.T) {
		requireCode(t, rmqpb.Code_ILLEGAL_TOPIC, send(&driver.Message{Topic: "wire bad topic!"}), "send")
		_, err := p.QueryRoute(ctx, s.b.Endpoint, "wire bad topic!")
		requireCode(t, rmqpb.Code_ILLEGAL_TOPIC, err, "route")
	})
	t.Run("ReservedPropertyKey", func(t *testing.T) {
		for _, key := range []string{"UNIQ_KEY", "TAGS", "DELAY"} {
			err := send(&driver.Message{Topic: TopicSend, Properties: map[string]string{key: "x"}})
			requireCode(t, rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, err, "property "+key)
		}
	})
	t.Run("UnknownTopic", func(t *testing.T) {
		_, err := p.QueryRoute(ctx, s.b.Endpoint, topicMissing)
		requireCode(t, rmqpb.Code_TOPIC_NOT_FOUND, err, "route")
		// The proxy checks the message type against the topic's before it
		// looks for queues, and a missing topic has no type: a send names
		// the type conflict, not the missing topic.
		requireCode(t, rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, send(&driver.Message{Topic: topicMissing}), "send")
	})
	t.Run("DriverRefusesBeforeSending", func(t *testing.T) {
		err := send(&driver.Message{Topic: TopicSend, Body: []byte{}})
		require.ErrorIs(t, err, driver.ErrBadRequest, "empty body")
		err = send(&driver.Message{Topic: TopicSend, Body: make([]byte, maxBody+1)})
		require.ErrorIs(t, err, driver.ErrTooLarge, "body above the server's announced limit")
		_, err = p.Send(ctx, q.Endpoint, nil)
		require.ErrorIs(t, err, driver.ErrBadRequest, "no messages")
	})

	c := s.consumer(t, GroupBad, driver.Filter{}, TopicSend)
	rq := s.route(ctx, t, c, TopicSend).ReadableQueues()[0]
	// A receipt handle that does not decode fails inside the proxy, which
	// answers INTERNAL_SERVER_ERROR (INVALID_RECEIPT_HANDLE is for handles
	// that decode but expired).
	const garbage = "not-a-receipt-handle"
	t.Run("GarbageReceiptHandleAck", func(t *testing.T) {
		errs, err := c.Ack(ctx, rq.Endpoint, TopicSend, []driver.AckEntry{{MessageID: p.NewMessageID(), ReceiptHandle: garbage}})
		if err == nil {
			require.Len(t, errs, 1)
			err = errs[0]
		}
		requireCode(t, rmqpb.Code_INTERNAL_SERVER_ERROR, err, "ack with a garbage receipt handle")
	})
	t.Run("GarbageReceiptHandleChange", func(t *testing.T) {
		_, err := c.ChangeInvisibleDuration(ctx, rq.Endpoint, TopicSend, garbage, p.NewMessageID(), time.Second)
		requireCode(t, rmqpb.Code_INTERNAL_SERVER_ERROR, err, "change invisible duration with a garbage receipt handle")
	})
	t.Run("InvisibleBelowMinimum", func(t *testing.T) {
		_, err := c.Receive(ctx, driver.ReceiveRequest{
			Queue: rq, BatchSize: 1, InvisibleDuration: s.b.MinInvisible / 2, LongPollingTimeout: s.b.MinLongPolling,
		})
		requireCode(t, rmqpb.Code_ILLEGAL_INVISIBLE_TIME, err, "receive with an invisible duration below the minimum")
		_, err = c.Receive(ctx, driver.ReceiveRequest{
			Queue: rq, BatchSize: 1, InvisibleDuration: 12*time.Hour + time.Second, LongPollingTimeout: s.b.MinLongPolling,
		})
		requireCode(t, rmqpb.Code_ILLEGAL_INVISIBLE_TIME, err, "receive with an invisible duration above 12 h")
	})

	// The server still serves well-formed requests after all of that.
	s.send(ctx, t, p, TopicSend, &driver.Message{Body: []byte("after bad inputs")})
}
