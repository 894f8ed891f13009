package driver

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// fakeServer is a scripted MessagingService on 127.0.0.1. It records what
// clients send and answers with its hooks, or with plain successes.
type fakeServer struct {
	rmqpb.UnimplementedMessagingServiceServer
	addr string
	srv  *grpc.Server

	mu           sync.Mutex
	headers      map[string][]metadata.MD // rpc -> metadata of each call
	settings     []*rmqpb.Settings        // Settings received on Telemetry
	streams      []rmqpb.MessagingService_TelemetryServer
	streamCancel []chan struct{}
	heartbeats   []*rmqpb.HeartbeatRequest
	terminations []*rmqpb.NotifyClientTerminationRequest
	endTx        []*rmqpb.EndTransactionRequest
	replies      []*rmqpb.TelemetryCommand // client frames after Settings
	sends        []*rmqpb.SendMessageRequest
	receives     []*rmqpb.ReceiveMessageRequest
	deadlines    []time.Duration // ReceiveMessage: time left at arrival
	discardSends bool            // benchmarks: do not keep SendMessage requests

	// Hooks; nil means a plain success.
	onTelemetryOpen func(n int) *rmqpb.TelemetryCommand // frame answering Settings on the n-th stream (0-based)
	onSend          func(*rmqpb.SendMessageRequest) *rmqpb.SendMessageResponse
	onReceive       func(*rmqpb.ReceiveMessageRequest, rmqpb.MessagingService_ReceiveMessageServer) error
	onRoute         func(*rmqpb.QueryRouteRequest) *rmqpb.QueryRouteResponse
	onAck           func(*rmqpb.AckMessageRequest) *rmqpb.AckMessageResponse
}

func startFake(t testing.TB, configure func(*fakeServer)) *fakeServer {
	t.Helper()
	f := &fakeServer{headers: map[string][]metadata.MD{}}
	if configure != nil {
		configure(f)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = lis.Addr().String()
	f.srv = grpc.NewServer()
	rmqpb.RegisterMessagingServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(lis) }()
	t.Cleanup(f.srv.Stop)
	return f
}

func ok() *rmqpb.Status { return &rmqpb.Status{Code: rmqpb.Code_OK, Message: "OK"} }

func (f *fakeServer) record(ctx context.Context, rpc string) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.headers[rpc] = append(f.headers[rpc], md)
	f.mu.Unlock()
}

func (f *fakeServer) lastHeader(rpc string) metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.headers[rpc]
	if len(h) == 0 {
		return nil
	}
	return h[len(h)-1]
}

func (f *fakeServer) count(get func(*fakeServer) int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return get(f)
}

// kickTelemetry ends every open Telemetry stream with an error.
func (f *fakeServer) kickTelemetry() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.streamCancel {
		select {
		case <-c:
		default:
			close(c)
		}
	}
}

// push sends a server command on the latest Telemetry stream.
func (f *fakeServer) push(t *testing.T, cmd *rmqpb.TelemetryCommand) {
	f.mu.Lock()
	s := f.streams[len(f.streams)-1]
	f.mu.Unlock()
	require.NoError(t, s.Send(cmd))
}

func (f *fakeServer) Telemetry(stream rmqpb.MessagingService_TelemetryServer) error {
	f.record(stream.Context(), "Telemetry")
	kick := make(chan struct{})
	f.mu.Lock()
	n := len(f.streams)
	f.streams = append(f.streams, stream)
	f.streamCancel = append(f.streamCancel, kick)
	f.mu.Unlock()
	recvErr := make(chan error, 1)
	go func() {
		for {
			cmd, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			f.mu.Lock()
			if s := cmd.GetSettings(); s != nil {
				f.settings = append(f.settings, s)
				f.mu.Unlock()
				var reply *rmqpb.TelemetryCommand
				if f.onTelemetryOpen != nil {
					reply = f.onTelemetryOpen(n)
				}
				if reply == nil {
					merged := proto.Clone(s).(*rmqpb.Settings)
					merged.BackoffPolicy = &rmqpb.RetryPolicy{MaxAttempts: 3, Strategy: &rmqpb.RetryPolicy_ExponentialBackoff{
						ExponentialBackoff: &rmqpb.ExponentialBackoff{Initial: durationpb.New(10 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2}}}
					if p := merged.GetPublishing(); p != nil {
						p.MaxBodySize = 4 << 20
						p.ValidateMessageType = true
					}
					if sub := merged.GetSubscription(); sub != nil {
						sub.ReceiveBatchSize = proto.Int32(16)
						sub.LongPollingTimeout = durationpb.New(5 * time.Second)
						sub.Fifo = proto.Bool(false)
					}
					reply = &rmqpb.TelemetryCommand{Status: ok(), Command: &rmqpb.TelemetryCommand_Settings{Settings: merged}}
				}
				if reply.Command == nil && reply.Status != nil {
					_ = stream.Send(reply)
					recvErr <- nil // complete the stream like the proxy does after a status-only frame
					return
				}
				_ = stream.Send(reply)
				continue
			}
			f.replies = append(f.replies, cmd)
			f.mu.Unlock()
		}
	}()
	select {
	case err := <-recvErr:
		if err != nil {
			return nil
		}
		return nil
	case <-kick:
		return errKicked
	case <-stream.Context().Done():
		return nil
	}
}

var errKicked = grpcStatusUnavailable("kicked by test")

func (f *fakeServer) QueryRoute(ctx context.Context, req *rmqpb.QueryRouteRequest) (*rmqpb.QueryRouteResponse, error) {
	f.record(ctx, "QueryRoute")
	if f.onRoute != nil {
		return f.onRoute(req), nil
	}
	host, port := req.GetEndpoints().GetAddresses()[0].GetHost(), req.GetEndpoints().GetAddresses()[0].GetPort()
	var qs []*rmqpb.MessageQueue
	for i := range 4 {
		qs = append(qs, &rmqpb.MessageQueue{
			Topic: req.GetTopic(), Id: int32(i), Permission: rmqpb.Permission_READ_WRITE,
			Broker:             &rmqpb.Broker{Name: "broker-a", Id: 0, Endpoints: &rmqpb.Endpoints{Scheme: rmqpb.AddressScheme_IPv4, Addresses: []*rmqpb.Address{{Host: host, Port: port}}}},
			AcceptMessageTypes: []rmqpb.MessageType{rmqpb.MessageType_NORMAL},
		})
	}
	return &rmqpb.QueryRouteResponse{Status: ok(), MessageQueues: qs}, nil
}

func (f *fakeServer) Heartbeat(ctx context.Context, req *rmqpb.HeartbeatRequest) (*rmqpb.HeartbeatResponse, error) {
	f.record(ctx, "Heartbeat")
	f.mu.Lock()
	f.heartbeats = append(f.heartbeats, req)
	f.mu.Unlock()
	return &rmqpb.HeartbeatResponse{Status: ok()}, nil
}

func (f *fakeServer) SendMessage(ctx context.Context, req *rmqpb.SendMessageRequest) (*rmqpb.SendMessageResponse, error) {
	if !f.discardSends {
		f.record(ctx, "SendMessage")
		f.mu.Lock()
		f.sends = append(f.sends, req)
		f.mu.Unlock()
	}
	if f.onSend != nil {
		return f.onSend(req), nil
	}
	resp := &rmqpb.SendMessageResponse{Status: ok()}
	for i, m := range req.GetMessages() {
		resp.Entries = append(resp.Entries, &rmqpb.SendResultEntry{Status: ok(), MessageId: m.GetSystemProperties().GetMessageId(), Offset: int64(100 + i)})
	}
	return resp, nil
}

func (f *fakeServer) ReceiveMessage(req *rmqpb.ReceiveMessageRequest, stream rmqpb.MessagingService_ReceiveMessageServer) error {
	f.record(stream.Context(), "ReceiveMessage")
	dl, _ := stream.Context().Deadline()
	f.mu.Lock()
	f.receives = append(f.receives, req)
	f.deadlines = append(f.deadlines, time.Until(dl))
	f.mu.Unlock()
	if f.onReceive != nil {
		return f.onReceive(req, stream)
	}
	if err := stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: &rmqpb.Status{Code: rmqpb.Code_MESSAGE_NOT_FOUND, Message: "no new message"}}}); err != nil {
		return err
	}
	return stream.Send(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.Now()}})
}

func (f *fakeServer) AckMessage(ctx context.Context, req *rmqpb.AckMessageRequest) (*rmqpb.AckMessageResponse, error) {
	f.record(ctx, "AckMessage")
	if f.onAck != nil {
		return f.onAck(req), nil
	}
	resp := &rmqpb.AckMessageResponse{Status: ok()}
	for _, e := range req.GetEntries() {
		resp.Entries = append(resp.Entries, &rmqpb.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: ok()})
	}
	return resp, nil
}

func (f *fakeServer) ChangeInvisibleDuration(ctx context.Context, req *rmqpb.ChangeInvisibleDurationRequest) (*rmqpb.ChangeInvisibleDurationResponse, error) {
	f.record(ctx, "ChangeInvisibleDuration")
	return &rmqpb.ChangeInvisibleDurationResponse{Status: ok(), ReceiptHandle: req.GetReceiptHandle() + "-renewed-" + req.GetInvisibleDuration().AsDuration().String()}, nil
}

func (f *fakeServer) ForwardMessageToDeadLetterQueue(ctx context.Context, req *rmqpb.ForwardMessageToDeadLetterQueueRequest) (*rmqpb.ForwardMessageToDeadLetterQueueResponse, error) {
	f.record(ctx, "ForwardMessageToDeadLetterQueue")
	if req.GetReceiptHandle() == "bad" {
		return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: &rmqpb.Status{Code: rmqpb.Code_INVALID_RECEIPT_HANDLE, Message: "bad handle"}}, nil
	}
	return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: ok()}, nil
}

func (f *fakeServer) QueryAssignment(ctx context.Context, req *rmqpb.QueryAssignmentRequest) (*rmqpb.QueryAssignmentResponse, error) {
	f.record(ctx, "QueryAssignment")
	mq := &rmqpb.MessageQueue{Topic: req.GetTopic(), Id: -1, Permission: rmqpb.Permission_READ_WRITE,
		Broker: &rmqpb.Broker{Name: "broker-a", Endpoints: req.GetEndpoints()}}
	return &rmqpb.QueryAssignmentResponse{Status: ok(), Assignments: []*rmqpb.Assignment{{MessageQueue: mq}}}, nil
}

func (f *fakeServer) EndTransaction(ctx context.Context, req *rmqpb.EndTransactionRequest) (*rmqpb.EndTransactionResponse, error) {
	f.record(ctx, "EndTransaction")
	f.mu.Lock()
	f.endTx = append(f.endTx, req)
	f.mu.Unlock()
	return &rmqpb.EndTransactionResponse{Status: ok()}, nil
}

func (f *fakeServer) NotifyClientTermination(ctx context.Context, req *rmqpb.NotifyClientTerminationRequest) (*rmqpb.NotifyClientTerminationResponse, error) {
	f.record(ctx, "NotifyClientTermination")
	f.mu.Lock()
	f.terminations = append(f.terminations, req)
	f.mu.Unlock()
	return &rmqpb.NotifyClientTerminationResponse{Status: ok()}, nil
}

func (f *fakeServer) RecallMessage(ctx context.Context, req *rmqpb.RecallMessageRequest) (*rmqpb.RecallMessageResponse, error) {
	f.record(ctx, "RecallMessage")
	return &rmqpb.RecallMessageResponse{Status: ok(), MessageId: "recalled-" + req.GetRecallHandle()}, nil
}
