package auth

import (
	"context"
	"errors"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// StatusCode maps an error of Check to its protocol code.
func StatusCode(err error) rmqpb.Code {
	if errors.Is(err, ErrForbidden) {
		return rmqpb.Code_FORBIDDEN
	}
	return rmqpb.Code_UNAUTHORIZED
}

// refusal builds the response of a unary method carrying only a status.
func refusal(fullMethod string, err error) (any, bool) {
	svc := rmqpb.File_apache_rocketmq_v2_service_proto.Services().ByName("MessagingService")
	m := svc.Methods().ByName(protoreflect.Name(path.Base(fullMethod)))
	if m == nil {
		return nil, false
	}
	mt, ferr := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if ferr != nil {
		return nil, false
	}
	resp := mt.New()
	fd := resp.Descriptor().Fields().ByName("status")
	if fd == nil {
		return nil, false
	}
	st := &rmqpb.Status{Code: StatusCode(err), Message: err.Error()}
	resp.Set(fd, protoreflect.ValueOfMessage(st.ProtoReflect()))
	return resp.Interface(), true
}

// UnaryInterceptor checks every unary request of the MessagingService; a
// refused one is answered with its status in the response body.
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		err := a.Check(ctx, path.Base(info.FullMethod), req)
		if err == nil {
			return handler(ctx, req)
		}
		if resp, ok := refusal(info.FullMethod, err); ok {
			return resp, nil
		}
		return nil, err
	}
}

// errRefused ends the handler of a refused stream; the interceptor then
// writes the refusal itself, after the handler returned, so that no two
// goroutines write the stream at once.
var errRefused = errors.New("auth: stream request refused")

type checkedStream struct {
	grpc.ServerStream
	a       *Authorizer
	rpc     string
	refused error
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.a.Check(s.ServerStream.Context(), s.rpc, m); err != nil {
		s.refused = err
		return errRefused
	}
	return nil
}

// StreamInterceptor checks the ReceiveMessage request and every inbound
// Telemetry command, and answers a refusal as the proxy does (see the
// package doc).
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		cs := &checkedStream{ServerStream: ss, a: a, rpc: path.Base(info.FullMethod)}
		err := handler(srv, cs)
		if cs.refused == nil {
			return err
		}
		st := &rmqpb.Status{Code: StatusCode(cs.refused), Message: cs.refused.Error()}
		switch info.FullMethod {
		case rmqpb.MessagingService_ReceiveMessage_FullMethodName:
			if err := ss.SendMsg(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}}); err != nil {
				return err
			}
			return ss.SendMsg(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_DeliveryTimestamp{
				DeliveryTimestamp: timestamppb.New(time.Now())}})
		case rmqpb.MessagingService_Telemetry_FullMethodName:
			return ss.SendMsg(&rmqpb.TelemetryCommand{Status: st})
		}
		return err
	}
}
