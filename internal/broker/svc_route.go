package broker

import (
	"context"
	"net"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// acceptTypes lists the message types a topic of type t accepts, as
// QueryRoute reports them (MIXED: all four).
func acceptTypes(t MessageType) []rmqpb.MessageType {
	switch t {
	case TypeFIFO:
		return []rmqpb.MessageType{rmqpb.MessageType_FIFO}
	case TypeDelay:
		return []rmqpb.MessageType{rmqpb.MessageType_DELAY}
	case TypeTransaction:
		return []rmqpb.MessageType{rmqpb.MessageType_TRANSACTION}
	case TypeMixed:
		return []rmqpb.MessageType{rmqpb.MessageType_NORMAL, rmqpb.MessageType_FIFO, rmqpb.MessageType_DELAY, rmqpb.MessageType_TRANSACTION}
	}
	return []rmqpb.MessageType{rmqpb.MessageType_NORMAL}
}

func brokerPB(p Peer) *rmqpb.Broker {
	host, port, _ := splitEndpoint(p.Endpoint)
	scheme := rmqpb.AddressScheme_DOMAIN_NAME
	if ip := net.ParseIP(host); ip != nil {
		scheme = rmqpb.AddressScheme_IPv4
		if ip.To4() == nil {
			scheme = rmqpb.AddressScheme_IPv6
		}
	}
	return &rmqpb.Broker{
		Name: p.Name,
		Id:   0,
		Endpoints: &rmqpb.Endpoints{
			Scheme:    scheme,
			Addresses: []*rmqpb.Address{{Host: host, Port: port}},
		},
	}
}

// knownTopic validates a topic resource and looks it up.
func (b *Broker) knownTopic(r *rmqpb.Resource) (Topic, error) {
	name := r.GetName()
	if err := checkTopicName(name); err != nil {
		return Topic{}, statusErr(rmqpb.Code_ILLEGAL_TOPIC, "topic %q is illegal: %v", name, err)
	}
	t, ok := b.topic(name)
	if !ok {
		return Topic{}, statusErr(rmqpb.Code_TOPIC_NOT_FOUND, "topic %s not found", name)
	}
	return t, nil
}

// knownGroup validates a group resource and looks it up.
func (b *Broker) knownGroup(r *rmqpb.Resource) (Group, error) {
	name := r.GetName()
	if err := checkGroupName(name); err != nil {
		return Group{}, statusErr(rmqpb.Code_ILLEGAL_CONSUMER_GROUP, "consumer group %q is illegal: %v", name, err)
	}
	return b.group(name)
}

func (s *service) QueryRoute(ctx context.Context, req *rmqpb.QueryRouteRequest) (*rmqpb.QueryRouteResponse, error) {
	t, err := s.b.knownTopic(req.GetTopic())
	if err != nil {
		return &rmqpb.QueryRouteResponse{Status: toStatus(err)}, nil
	}
	resp := &rmqpb.QueryRouteResponse{Status: okStatus()}
	res := &rmqpb.Resource{ResourceNamespace: req.GetTopic().GetResourceNamespace(), Name: t.Name}
	for _, p := range s.b.brokers() {
		bpb := brokerPB(p)
		for q := 0; q < t.Queues; q++ {
			resp.MessageQueues = append(resp.MessageQueues, &rmqpb.MessageQueue{
				Topic:              res,
				Id:                 int32(q),
				Permission:         rmqpb.Permission_READ_WRITE,
				Broker:             bpb,
				AcceptMessageTypes: acceptTypes(t.Type),
			})
		}
	}
	return resp, nil
}

func (s *service) QueryAssignment(ctx context.Context, req *rmqpb.QueryAssignmentRequest) (*rmqpb.QueryAssignmentResponse, error) {
	t, err := s.b.knownTopic(req.GetTopic())
	if err != nil {
		return &rmqpb.QueryAssignmentResponse{Status: toStatus(err)}, nil
	}
	g, err := s.b.knownGroup(req.GetGroup())
	if err != nil {
		return &rmqpb.QueryAssignmentResponse{Status: toStatus(err)}, nil
	}
	resp := &rmqpb.QueryAssignmentResponse{Status: okStatus()}
	res := &rmqpb.Resource{ResourceNamespace: req.GetTopic().GetResourceNamespace(), Name: t.Name}
	mq := func(bpb *rmqpb.Broker, id int32) *rmqpb.Assignment {
		return &rmqpb.Assignment{MessageQueue: &rmqpb.MessageQueue{
			Topic: res, Id: id, Permission: rmqpb.Permission_READ_WRITE, Broker: bpb, AcceptMessageTypes: acceptTypes(t.Type),
		}}
	}
	for _, p := range s.b.brokers() {
		bpb := brokerPB(p)
		if !g.FIFO {
			// -1: receive from any queue of that broker.
			resp.Assignments = append(resp.Assignments, mq(bpb, -1))
			continue
		}
		for q := 0; q < t.Queues; q++ {
			resp.Assignments = append(resp.Assignments, mq(bpb, int32(q)))
		}
	}
	return resp, nil
}

// consumerTypes are the client types that carry a consumer group.
func isConsumer(t rmqpb.ClientType) bool {
	return t == rmqpb.ClientType_PUSH_CONSUMER || t == rmqpb.ClientType_SIMPLE_CONSUMER
}

func (s *service) Heartbeat(ctx context.Context, req *rmqpb.HeartbeatRequest) (*rmqpb.HeartbeatResponse, error) {
	// The proxy dispatches on the client type of the stored Settings, not on
	// the request's: a client that never sent Settings is unrecognized.
	if err := checkLanguage(ctx); err != nil {
		return &rmqpb.HeartbeatResponse{Status: toStatus(err)}, nil
	}
	settings := s.b.clientSettings(clientIDFrom(ctx))
	if settings == nil {
		return &rmqpb.HeartbeatResponse{Status: toStatus(statusErr(rmqpb.Code_UNRECOGNIZED_CLIENT_TYPE,
			"client %s sent no Settings on its Telemetry stream", clientIDFrom(ctx)))}, nil
	}
	if isConsumer(settings.GetClientType()) {
		if _, err := s.b.knownGroup(req.GetGroup()); err != nil {
			return &rmqpb.HeartbeatResponse{Status: toStatus(err)}, nil
		}
	}
	return &rmqpb.HeartbeatResponse{Status: okStatus()}, nil
}

func (s *service) NotifyClientTermination(ctx context.Context, req *rmqpb.NotifyClientTerminationRequest) (*rmqpb.NotifyClientTerminationResponse, error) {
	if err := checkLanguage(ctx); err != nil {
		return &rmqpb.NotifyClientTerminationResponse{Status: toStatus(err)}, nil
	}
	id := clientIDFrom(ctx)
	settings := s.b.clientSettings(id)
	if settings == nil {
		return &rmqpb.NotifyClientTerminationResponse{Status: toStatus(statusErr(rmqpb.Code_UNRECOGNIZED_CLIENT_TYPE,
			"client %s sent no Settings on its Telemetry stream", id))}, nil
	}
	if isConsumer(settings.GetClientType()) && req.GetGroup() != nil {
		if err := checkGroupName(req.GetGroup().GetName()); err != nil {
			return &rmqpb.NotifyClientTerminationResponse{Status: toStatus(statusErr(rmqpb.Code_ILLEGAL_CONSUMER_GROUP,
				"consumer group %q is illegal: %v", req.GetGroup().GetName(), err))}, nil
		}
	}
	// Its auto-renewed deliveries go back after a second (see renew).
	s.b.forgetClient(id)
	return &rmqpb.NotifyClientTerminationResponse{Status: okStatus()}, nil
}
