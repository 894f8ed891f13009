package broker

import (
	"context"
	"path"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Faults injects failures into the RPCs of the brokers it is given to, for
// failover tests. It is safe for concurrent use; the zero value injects
// nothing. One Faults may outlive a broker: give it to the broker that
// restarts on the same data dir and the faults carry over.
//
// Faults act before an RPC reaches the service: a paused or slowed call has
// done nothing yet, and a failed call has changed nothing.
type Faults struct {
	mu       sync.Mutex
	resume   chan struct{} // non-nil while paused; closed by Resume
	latency  time.Duration
	failN    int
	failCode rmqpb.Code // CODE_UNSPECIFIED: fail with gRPC UNAVAILABLE
}

// Pause makes every RPC that starts from now on hang until Resume (or until
// its context ends). RPCs already running are not affected.
func (f *Faults) Pause() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resume == nil {
		f.resume = make(chan struct{})
	}
}

// Resume releases the RPCs held by Pause.
func (f *Faults) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resume != nil {
		close(f.resume)
		f.resume = nil
	}
}

// Paused reports whether the broker is paused.
func (f *Faults) Paused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resume != nil
}

// SetLatency adds d before every RPC (0 removes it).
func (f *Faults) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = max(d, 0)
}

// FailNext makes the next n RPCs fail with gRPC UNAVAILABLE, as a broker
// that went away would.
func (f *Faults) FailNext(n int) { f.FailNextWithStatus(n, rmqpb.Code_CODE_UNSPECIFIED) }

// FailNextWithStatus makes the next n RPCs answer gRPC OK with the protocol
// status code (for example INTERNAL_SERVER_ERROR) and nothing else, as the
// proxy does when its broker fails. CODE_UNSPECIFIED means gRPC UNAVAILABLE.
func (f *Faults) FailNextWithStatus(n int, code rmqpb.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN = max(n, 0)
	f.failCode = code
}

// enter applies the faults to one RPC. It returns fail=true when the call
// must fail, with the code to fail with, or the context's error if the call
// ended while held.
func (f *Faults) enter(ctx context.Context, stop <-chan struct{}) (fail bool, code rmqpb.Code, err error) {
	if f == nil {
		return false, 0, nil
	}
	f.mu.Lock()
	resume, latency := f.resume, f.latency
	f.mu.Unlock()
	if resume != nil {
		select {
		case <-resume:
		case <-ctx.Done():
			return false, 0, ctxToGRPC(ctx.Err())
		case <-stop:
			return false, 0, errStopping
		}
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, 0, ctxToGRPC(ctx.Err())
		case <-stop:
			t.Stop()
			return false, 0, errStopping
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failN > 0 {
		f.failN--
		return true, f.failCode, nil
	}
	return false, 0, nil
}

func ctxToGRPC(err error) error {
	return grpcstatus.FromContextError(err).Err()
}

var (
	errInjected = grpcstatus.Error(codes.Unavailable, "broker: injected failure")
	errStopping = grpcstatus.Error(codes.Unavailable, "broker: shutting down")
)

// failResponse builds the response of a unary method carrying only a status.
func failResponse(fullMethod string, code rmqpb.Code, msg string) (proto.Message, bool) {
	svc := rmqpb.File_apache_rocketmq_v2_service_proto.Services().ByName("MessagingService")
	if svc == nil {
		return nil, false
	}
	m := svc.Methods().ByName(protoreflect.Name(path.Base(fullMethod)))
	if m == nil {
		return nil, false
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if err != nil {
		return nil, false
	}
	resp := mt.New()
	fd := resp.Descriptor().Fields().ByName("status")
	if fd == nil {
		return nil, false
	}
	st := &rmqpb.Status{Code: code, Message: msg}
	resp.Set(fd, protoreflect.ValueOfMessage(st.ProtoReflect()))
	return resp.Interface(), true
}

// unaryInterceptor applies the faults to unary RPCs; held calls give up when
// stop closes (the broker is closing).
func (f *Faults) unaryInterceptor(stop <-chan struct{}) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return f.unary(ctx, stop, req, info, handler)
	}
}

func (f *Faults) streamInterceptor(stop <-chan struct{}) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return f.stream(stop, srv, ss, info, handler)
	}
}

func (f *Faults) unary(ctx context.Context, stop <-chan struct{}, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	fail, code, err := f.enter(ctx, stop)
	if err != nil {
		return nil, err
	}
	if fail {
		if code != rmqpb.Code_CODE_UNSPECIFIED {
			if resp, ok := failResponse(info.FullMethod, code, "broker: injected failure"); ok {
				return resp, nil
			}
		}
		return nil, errInjected
	}
	return handler(ctx, req)
}

func (f *Faults) stream(stop <-chan struct{}, srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	fail, code, err := f.enter(ss.Context(), stop)
	if err != nil {
		return err
	}
	if fail {
		if code != rmqpb.Code_CODE_UNSPECIFIED && info.FullMethod == rmqpb.MessagingService_ReceiveMessage_FullMethodName {
			st := &rmqpb.Status{Code: code, Message: "broker: injected failure"}
			if err := ss.SendMsg(&rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}}); err != nil {
				return err
			}
			return ss.SendMsg(deliveryTimestampResponse(time.Now()))
		}
		return errInjected
	}
	return handler(srv, ss)
}
