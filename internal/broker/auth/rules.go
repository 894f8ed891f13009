package auth

import (
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// Publisher is a request, other than a generated message, that publishes to
// one topic: the broker decodes SendMessage into a type of its own and
// hands that to the interceptors. ok is false when the request names no
// message, which the broker refuses itself (nothing to authorize).
type Publisher interface {
	PublishTopic() (topic string, ok bool)
}

// authorize applies the permission rules of the package doc to one request
// message.
func authorize(u *User, req any) error {
	subGroupTopic := func(group, topic string) error {
		if err := u.canUseGroup(group); err != nil {
			return err
		}
		return u.canSubscribeTopic(topic)
	}
	switch r := req.(type) {
	case *rmqpb.SendMessageRequest:
		if len(r.GetMessages()) == 0 {
			return nil // the broker answers MESSAGE_CORRUPTED; nothing to read
		}
		return u.canPublish(r.GetMessages()[0].GetTopic().GetName())
	case *rmqpb.RecallMessageRequest:
		return u.canPublish(r.GetTopic().GetName())
	case *rmqpb.EndTransactionRequest:
		return u.canPublish(r.GetTopic().GetName())
	case *rmqpb.QueryRouteRequest:
		t := r.GetTopic().GetName()
		if u.canPublish(t) == nil || u.canSubscribeTopic(t) == nil {
			return nil
		}
		return forbidden("%s has no permission to publish to or subscribe to topic %s", u.AccessKey, t)
	case *rmqpb.HeartbeatRequest:
		switch r.GetClientType() {
		case rmqpb.ClientType_PUSH_CONSUMER, rmqpb.ClientType_SIMPLE_CONSUMER, rmqpb.ClientType_PULL_CONSUMER:
			return u.canUseGroup(r.GetGroup().GetName())
		}
		return nil
	case *rmqpb.ChangeInvisibleDurationRequest:
		return u.canUseGroup(r.GetGroup().GetName())
	case *rmqpb.NotifyClientTerminationRequest:
		if r.GetGroup() != nil && r.GetGroup().GetName() != "" {
			return u.canUseGroup(r.GetGroup().GetName())
		}
		return nil
	case *rmqpb.ReceiveMessageRequest:
		return subGroupTopic(r.GetGroup().GetName(), r.GetMessageQueue().GetTopic().GetName())
	case *rmqpb.AckMessageRequest:
		return subGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *rmqpb.ForwardMessageToDeadLetterQueueRequest:
		return subGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *rmqpb.QueryAssignmentRequest:
		return subGroupTopic(r.GetGroup().GetName(), r.GetTopic().GetName())
	case *rmqpb.TelemetryCommand:
		return authorizeTelemetry(u, r)
	case Publisher:
		t, ok := r.PublishTopic()
		if !ok {
			return nil
		}
		return u.canPublish(t)
	}
	return nil
}

func authorizeTelemetry(u *User, c *rmqpb.TelemetryCommand) error {
	s := c.GetSettings()
	if s == nil {
		return nil // replies to server commands carry no resource
	}
	if pub := s.GetPublishing(); pub != nil {
		for _, t := range pub.GetTopics() {
			if err := u.canPublish(t.GetName()); err != nil {
				return err
			}
		}
		return nil
	}
	if sub := s.GetSubscription(); sub != nil {
		if err := u.canUseGroup(sub.GetGroup().GetName()); err != nil {
			return err
		}
		for _, e := range sub.GetSubscriptions() {
			if err := u.canSubscribeTopic(e.GetTopic().GetName()); err != nil {
				return err
			}
		}
		return nil
	}
	return forbidden("settings carry neither publishing nor subscription")
}
