package broker

import (
	"context"
	"slices"

	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// messagingServiceDesc is the generated MessagingService description with
// one change: SendMessage decodes its request into a sendRequest (the
// broker's own wire decoder) instead of the generated struct. The
// generated description is copied, never modified.
func messagingServiceDesc() *grpc.ServiceDesc {
	desc := rmqpb.MessagingService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "SendMessage" {
			desc.Methods[i].Handler = sendMessageHandler
		}
	}
	return &desc
}

// sendMessageHandler is the generated unary handler of SendMessage with the
// request decoded by sendRequest. The interceptor chain (faults, auth,
// client id and metrics) sees the *sendRequest; auth reads its topic
// through PublishTopic. The response is a sendReply, which encodes itself.
// The received bytes are released once the chain returns, whether the send
// ran or an interceptor answered for it.
func sendMessageHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*service)
	req := &sendRequest{pool: &s.sendScratch}
	if err := dec(req); err != nil {
		// The codec has freed the buffer; gRPC answers INTERNAL, as for a
		// generated request that does not unmarshal.
		return nil, err
	}
	defer req.release()
	if interceptor == nil {
		return s.sendWire(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rmqpb.MessagingService_SendMessage_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, r any) (any, error) {
		return s.sendWire(ctx, r.(*sendRequest))
	})
}

// sendWire serves a decoded request and answers with a response that
// encodes itself (sendReply).
func (s *service) sendWire(ctx context.Context, req *sendRequest) (any, error) {
	return s.sendDecoded(ctx, req), nil
}
