package auth

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// fakeService counts the requests that reach it and answers with data.
type fakeService struct {
	rmqpb.UnimplementedMessagingServiceServer
	reached atomic.Int32
}

func (s *fakeService) SendMessage(context.Context, *rmqpb.SendMessageRequest) (*rmqpb.SendMessageResponse, error) {
	s.reached.Add(1)
	return &rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_OK}, Entries: []*rmqpb.SendResultEntry{{MessageId: "x"}}}, nil
}

func (s *fakeService) ReceiveMessage(req *rmqpb.ReceiveMessageRequest, stream grpc.ServerStreamingServer[rmqpb.ReceiveMessageResponse]) error {
	s.reached.Add(1)
	if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: &rmqpb.Status{Code: rmqpb.Code_OK}}}); err != nil {
		return err
	}
	return stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Message{Message: &rmqpb.Message{Body: []byte("secret")}}})
}

func (s *fakeService) Telemetry(stream grpc.BidiStreamingServer[rmqpb.TelemetryCommand, rmqpb.TelemetryCommand]) error {
	for {
		cmd, err := stream.Recv()
		if err != nil {
			return err
		}
		s.reached.Add(1)
		if err := stream.Send(&rmqpb.TelemetryCommand{Status: &rmqpb.Status{Code: rmqpb.Code_OK}, Command: cmd.Command}); err != nil {
			return err
		}
	}
}

func startFake(t *testing.T, a *Authorizer) (rmqpb.MessagingServiceClient, *fakeService) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(a.UnaryInterceptor()), grpc.StreamInterceptor(a.StreamInterceptor()))
	fs := &fakeService{}
	rmqpb.RegisterMessagingServiceServer(srv, fs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///buf",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return rmqpb.NewMessagingServiceClient(cc), fs
}

func outgoing(t *testing.T, ak, sk string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if ak == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, HeaderAuthorization, FormatAuthorization(ak, sk, dt), HeaderDateTime, dt)
}

func TestInterceptorsAnswerInBody(t *testing.T) {
	c, fs := startFake(t, testAuthorizer(t))

	resp, err := c.SendMessage(outgoing(t, "", ""), send("orders"))
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_UNAUTHORIZED, resp.GetStatus().GetCode())
	require.Empty(t, resp.GetEntries())
	resp, err = c.SendMessage(outgoing(t, "pub", "pubSK"), send("payments"))
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_FORBIDDEN, resp.GetStatus().GetCode())
	require.Zero(t, fs.reached.Load(), "a refused request reaches no handler")
	resp, err = c.SendMessage(outgoing(t, "pub", "pubSK"), send("orders"))
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())

	recv := func(ctx context.Context) []*rmqpb.ReceiveMessageResponse {
		st, err := c.ReceiveMessage(ctx, &rmqpb.ReceiveMessageRequest{Group: &rmqpb.Resource{Name: "billing"},
			MessageQueue: &rmqpb.MessageQueue{Topic: &rmqpb.Resource{Name: "orders"}}})
		require.NoError(t, err)
		var out []*rmqpb.ReceiveMessageResponse
		for {
			r, err := st.Recv()
			if err != nil {
				return out
			}
			out = append(out, r)
		}
	}
	got := recv(outgoing(t, "pub", "pubSK"))
	require.Len(t, got, 2)
	require.Equal(t, rmqpb.Code_FORBIDDEN, got[0].GetStatus().GetCode())
	require.NotNil(t, got[1].GetDeliveryTimestamp())
	got = recv(outgoing(t, "sub", "subSK"))
	require.Len(t, got, 2)
	require.Equal(t, []byte("secret"), got[1].GetMessage().GetBody())

	tel, err := c.Telemetry(outgoing(t, "sub", "wrong"))
	require.NoError(t, err)
	require.NoError(t, tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{}}}}}))
	cmd, err := tel.Recv()
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_UNAUTHORIZED, cmd.GetStatus().GetCode())
	require.Nil(t, cmd.GetCommand())
	_, err = tel.Recv()
	require.Error(t, err, "the stream completes after a refusal")
	require.Equal(t, int32(2), fs.reached.Load())
}
