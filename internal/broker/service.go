package broker

import (
	"context"
	"net"
	"path"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// service implements rmqpb.MessagingServiceServer for a Broker. It is kept
// apart from Broker so the broker's exported API stays small.
type service struct {
	rmqpb.UnimplementedMessagingServiceServer
	b *Broker
	// sendScratch recycles the decoding memory of SendMessage requests
	// (*sendScratch, see sendRequest).
	sendScratch sync.Pool
}

// Request headers of the protocol.
const (
	headerClientID      = "x-mq-client-id"
	headerClientVersion = "x-mq-client-version"
	headerLanguage      = "x-mq-language"
)

// header returns the first value of the request header key (lower case),
// without copying the request's whole metadata as FromIncomingContext does.
func header(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func clientIDFrom(ctx context.Context) string { return header(ctx, headerClientID) }

func clientVersionFrom(ctx context.Context) string { return header(ctx, headerClientVersion) }

// checkLanguage mirrors the proxy, which parses x-mq-language as a remoting
// LanguageCode when it registers a client (Settings, Heartbeat,
// NotifyClientTermination) and fails with an internal error on anything
// else: "GO" is right, "GOLANG" (the UA enum name) is not.
func checkLanguage(ctx context.Context) error {
	switch l := header(ctx, headerLanguage); l {
	case "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS":
		return nil
	default:
		return statusErr(rmqpb.Code_INTERNAL_SERVER_ERROR, "x-mq-language %q is not a RocketMQ language code (JAVA, GO, ...)", l)
	}
}

// peerHost is the address of the caller, the default born host.
func peerHost(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			return host
		}
		return p.Addr.String()
	}
	return ""
}

// statusCodeOf reads the Status of a response, for metrics.
func statusCodeOf(resp any) string {
	m, ok := resp.(proto.Message)
	if !ok {
		return "none"
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("status")
	if fd == nil || fd.Kind() != protoreflect.MessageKind || !r.Has(fd) {
		return "none"
	}
	st, ok := r.Get(fd).Message().Interface().(*rmqpb.Status)
	if !ok {
		return "none"
	}
	return st.GetCode().String()
}

// unaryInterceptor requires x-mq-client-id on every call (the proxy answers
// CLIENT_ID_REQUIRED without it), keeps the client alive and counts calls.
func (b *Broker) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	rpc := path.Base(info.FullMethod)
	id := clientIDFrom(ctx)
	if id == "" {
		if resp, ok := failResponse(info.FullMethod, rmqpb.Code_CLIENT_ID_REQUIRED, "x-mq-client-id header is required"); ok {
			b.met.requests.WithLabelValues(rpc, rmqpb.Code_CLIENT_ID_REQUIRED.String()).Inc()
			return resp, nil
		}
	}
	b.touchClient(id, time.Now())
	resp, err := handler(ctx, req)
	code := statusCodeOf(resp)
	if err != nil {
		code = "grpc_" + grpcstatus.Code(err).String()
	}
	b.met.requests.WithLabelValues(rpc, code).Inc()
	return resp, err
}

// recordingStream remembers the first status a ReceiveMessage stream sends.
type recordingStream struct {
	grpc.ServerStream
	code string
}

func (s *recordingStream) SendMsg(m any) error {
	if r, ok := m.(*rmqpb.ReceiveMessageResponse); ok && s.code == "" {
		if st := r.GetStatus(); st != nil {
			s.code = st.GetCode().String()
		}
	}
	return s.ServerStream.SendMsg(m)
}

func (b *Broker) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	rpc := path.Base(info.FullMethod)
	id := clientIDFrom(ss.Context())
	if id == "" {
		b.met.requests.WithLabelValues(rpc, rmqpb.Code_CLIENT_ID_REQUIRED.String()).Inc()
		st := &rmqpb.Status{Code: rmqpb.Code_CLIENT_ID_REQUIRED, Message: "x-mq-client-id header is required"}
		switch info.FullMethod {
		case rmqpb.MessagingService_ReceiveMessage_FullMethodName:
			if err := ss.SendMsg(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}}); err != nil {
				return err
			}
			return ss.SendMsg(deliveryTimestampResponse(time.Now()))
		case rmqpb.MessagingService_Telemetry_FullMethodName:
			// The proxy writes one command carrying only the status and
			// completes the stream with gRPC OK.
			return ss.SendMsg(&rmqpb.TelemetryCommand{Status: st})
		}
	}
	b.touchClient(id, time.Now())
	rs := &recordingStream{ServerStream: ss}
	err := handler(srv, rs)
	code := rs.code
	switch {
	case err != nil:
		code = "grpc_" + grpcstatus.Code(err).String()
	case code == "":
		code = "OK"
	}
	b.met.requests.WithLabelValues(rpc, code).Inc()
	return err
}

func deliveryTimestampResponse(now time.Time) *rmqpb.ReceiveMessageResponse {
	return &rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.New(now)}}
}
