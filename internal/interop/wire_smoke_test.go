//go:build interop

package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Names created by interop/run.sh.
const smokeTopic = "interop_normal"

// endpointFromEnv returns the peer's gRPC endpoint or fails the test: the
// suite never skips for want of a peer.
func endpointFromEnv(t *testing.T) string {
	t.Helper()
	ep := os.Getenv("TWINMQ_INTEROP_ENDPOINT")
	if ep == "" {
		t.Fatal("TWINMQ_INTEROP_ENDPOINT is not set: run the suite with `make interop`")
	}
	return ep
}

// randomHex returns n random bytes as upper-case hex.
func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return strings.ToUpper(hex.EncodeToString(b))
}

// wireClient is a bare protocol client: one client id and the headers the
// proxy requires on every call, fresh request id and date each time.
type wireClient struct {
	t        *testing.T
	clientID string
	svc      rmqpb.MessagingServiceClient
}

func (c *wireClient) ctx(parent context.Context) context.Context {
	return metadata.AppendToOutgoingContext(parent,
		"x-mq-client-id", c.clientID,
		"x-mq-language", "GO",
		"x-mq-protocol", "v2",
		"x-mq-client-version", "5.1.4",
		"x-mq-request-id", randomHex(c.t, 16),
		"x-mq-date-time", time.Now().Format("20060102T150405Z"),
	)
}

// accessPoint describes the endpoint the way QueryRoute and Settings want
// it: an explicit IPv4 scheme (the proxy cannot parse UNSPECIFIED).
func accessPoint(t *testing.T, endpoint string) *rmqpb.Endpoints {
	t.Helper()
	host, portText, err := net.SplitHostPort(endpoint)
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)
	return &rmqpb.Endpoints{
		Scheme:    rmqpb.AddressScheme_IPv4,
		Addresses: []*rmqpb.Address{{Host: host, Port: int32(port)}},
	}
}

// dialWire connects to the peer and returns a client with a fresh client id.
func dialWire(t *testing.T, endpoint string) *wireClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	host, _ := os.Hostname()
	return &wireClient{
		t:        t,
		clientID: fmt.Sprintf("%s@%d@%s@%s", host, os.Getpid(), randomHex(t, 2), strconv.FormatInt(time.Now().UnixMicro(), 36)),
		svc:      rmqpb.NewMessagingServiceClient(conn),
	}
}

// handshake opens the Telemetry stream, sends settings and returns the
// stream with the server's echo, which must be OK.
func (c *wireClient) handshake(ctx context.Context, settings *rmqpb.Settings) (rmqpb.MessagingService_TelemetryClient, *rmqpb.Settings) {
	c.t.Helper()
	tele, err := c.svc.Telemetry(c.ctx(ctx))
	require.NoError(c.t, err)
	require.NoError(c.t, tele.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: settings}}))
	echo, err := tele.Recv()
	require.NoError(c.t, err, "no Settings echo on the Telemetry stream")
	require.Equal(c.t, rmqpb.Code_OK, echo.GetStatus().GetCode(), "settings echo status: %v", echo.GetStatus())
	require.NotNil(c.t, echo.GetSettings(), "the echo must carry the merged settings")
	return tele, echo.GetSettings()
}

func userAgent() *rmqpb.UA {
	host, _ := os.Hostname()
	return &rmqpb.UA{Language: rmqpb.Language_GOLANG, Version: "5.1.4", Platform: "linux", Hostname: host}
}

// TestWireSmokeSend walks the producer's start-up and one send against the
// real proxy: Telemetry Settings and its echo, QueryRoute, SendMessage,
// NotifyClientTermination. It proves the harness and the generated protocol
// code before any driver code is involved.
func TestWireSmokeSend(t *testing.T) {
	endpoint := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c := dialWire(t, endpoint)
	ap := accessPoint(t, endpoint)
	host, _ := os.Hostname()

	// Settings first: the proxy keys the client's registration on them.
	producer := rmqpb.ClientType_PRODUCER
	tele, echo := c.handshake(ctx, &rmqpb.Settings{
		ClientType:     &producer,
		AccessPoint:    ap,
		RequestTimeout: durationpb.New(3 * time.Second),
		PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{
			Topics: []*rmqpb.Resource{{Name: smokeTopic}},
		}},
		UserAgent: userAgent(),
	})
	pub := echo.GetPublishing()
	require.NotNil(t, pub, "the echo must carry the merged publishing settings")
	require.Positive(t, pub.GetMaxBodySize(), "the proxy announces its body size limit")

	route, err := c.svc.QueryRoute(c.ctx(ctx), &rmqpb.QueryRouteRequest{
		Topic:     &rmqpb.Resource{Name: smokeTopic},
		Endpoints: ap,
	})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, route.GetStatus().GetCode(), "route status: %v", route.GetStatus())
	var queue *rmqpb.MessageQueue
	for _, q := range route.GetMessageQueues() {
		perm := q.GetPermission()
		if q.GetBroker().GetId() == 0 && (perm == rmqpb.Permission_WRITE || perm == rmqpb.Permission_READ_WRITE) {
			queue = q
			break
		}
	}
	require.NotNil(t, queue, "no writable master queue in route %v", route.GetMessageQueues())
	require.Contains(t, queue.GetAcceptMessageTypes(), rmqpb.MessageType_NORMAL)

	messageID := "01" + randomHex(t, 16)
	tag := "smoke"
	sent, err := c.svc.SendMessage(c.ctx(ctx), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{
		Topic: &rmqpb.Resource{Name: smokeTopic},
		SystemProperties: &rmqpb.SystemProperties{
			Tag:           &tag,
			MessageId:     messageID,
			BodyEncoding:  rmqpb.Encoding_IDENTITY,
			MessageType:   rmqpb.MessageType_NORMAL,
			BornTimestamp: timestamppb.Now(),
			BornHost:      host,
			QueueId:       queue.GetId(),
		},
		Body: []byte("twinmq interop smoke"),
	}}})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, sent.GetStatus().GetCode(), "send status: %v", sent.GetStatus())
	require.Len(t, sent.GetEntries(), 1)
	entry := sent.GetEntries()[0]
	require.Equal(t, rmqpb.Code_OK, entry.GetStatus().GetCode())
	require.Equal(t, messageID, entry.GetMessageId(), "a single send reports the client's message id")

	bye, err := c.svc.NotifyClientTermination(c.ctx(ctx), &rmqpb.NotifyClientTerminationRequest{})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, bye.GetStatus().GetCode(), "termination status: %v", bye.GetStatus())
	require.NoError(t, tele.CloseSend())
}

// TestWireGroupSettings checks that the groups interop/run.sh creates exist
// with the properties the suite relies on, as the proxy reports them in the
// Settings echo of a simple consumer: FIFO for the orderly group, and the
// delivery attempts before the dead-letter queue.
func TestWireGroupSettings(t *testing.T) {
	endpoint := endpointFromEnv(t)
	cases := []struct {
		group       string
		fifo        bool
		maxAttempts int32
	}{
		{group: "interop_group", fifo: false, maxAttempts: 17},
		{group: "interop_fifo_group", fifo: true, maxAttempts: 17},
		{group: "interop_dlq_group", fifo: false, maxAttempts: 3},
	}
	for _, tc := range cases {
		t.Run(tc.group, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := dialWire(t, endpoint)
			consumer := rmqpb.ClientType_SIMPLE_CONSUMER
			topic := smokeTopic
			if tc.fifo {
				topic = "interop_fifo"
			}
			tele, echo := c.handshake(ctx, &rmqpb.Settings{
				ClientType:     &consumer,
				AccessPoint:    accessPoint(t, endpoint),
				RequestTimeout: durationpb.New(3 * time.Second),
				PubSub: &rmqpb.Settings_Subscription{Subscription: &rmqpb.Subscription{
					Group: &rmqpb.Resource{Name: tc.group},
					Subscriptions: []*rmqpb.SubscriptionEntry{{
						Topic:      &rmqpb.Resource{Name: topic},
						Expression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"},
					}},
				}},
				UserAgent: userAgent(),
			})
			sub := echo.GetSubscription()
			require.NotNil(t, sub, "the echo must carry the merged subscription settings")
			require.Equal(t, tc.fifo, sub.GetFifo(), "fifo flag of %s", tc.group)
			require.Equal(t, tc.maxAttempts, echo.GetBackoffPolicy().GetMaxAttempts(), "max attempts of %s", tc.group)

			bye, err := c.svc.NotifyClientTermination(c.ctx(ctx), &rmqpb.NotifyClientTerminationRequest{
				Group: &rmqpb.Resource{Name: tc.group},
			})
			require.NoError(t, err)
			require.Equal(t, rmqpb.Code_OK, bye.GetStatus().GetCode(), "termination status: %v", bye.GetStatus())
			require.NoError(t, tele.CloseSend())
		})
	}
}
