package driver

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// ServerSettings is the server's merged view of a client's settings, as
// echoed on the Telemetry stream. Zero fields mean the server sent none.
type ServerSettings struct {
	ClientType     ClientType
	RequestTimeout time.Duration
	// Retry is the server's retry policy: for producers how often to try a
	// send, for consumers how many deliveries before dead-lettering and the
	// backoff between them.
	Retry RetryPolicy

	// Producer side.
	MaxBodySize         int
	ValidateMessageType bool

	// Consumer side.
	FIFO               bool
	ReceiveBatchSize   int
	LongPollingTimeout time.Duration

	MetricsOn bool
}

// RetryPolicy is a server-pushed retry policy. Exactly one of the
// exponential fields or Customized is set when the server sent a strategy.
type RetryPolicy struct {
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	Multiplier  float64
	// Customized lists the delay before attempt 2, 3, ...
	Customized []time.Duration
}

// Backoff returns the delay before the given attempt (1 = first retry
// after the first failure), or 0 when the policy has no strategy.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if len(p.Customized) > 0 {
		if attempt > len(p.Customized) {
			return p.Customized[len(p.Customized)-1]
		}
		return p.Customized[attempt-1]
	}
	if p.Initial <= 0 {
		return 0
	}
	d := float64(p.Initial)
	m := p.Multiplier
	if m < 1 {
		m = 1
	}
	for i := 1; i < attempt; i++ {
		d *= m
		if p.Max > 0 && d >= float64(p.Max) {
			return p.Max
		}
	}
	if p.Max > 0 && time.Duration(d) > p.Max {
		return p.Max
	}
	return time.Duration(d)
}

func serverSettingsFromPB(s *rmqpb.Settings) ServerSettings {
	out := ServerSettings{
		RequestTimeout: s.GetRequestTimeout().AsDuration(),
		MetricsOn:      s.GetMetric().GetOn(),
	}
	switch s.GetClientType() {
	case rmqpb.ClientType_PRODUCER:
		out.ClientType = Producer
	case rmqpb.ClientType_PUSH_CONSUMER:
		out.ClientType = PushConsumer
	case rmqpb.ClientType_SIMPLE_CONSUMER:
		out.ClientType = SimpleConsumer
	}
	if bp := s.GetBackoffPolicy(); bp != nil {
		out.Retry.MaxAttempts = int(bp.GetMaxAttempts())
		if e := bp.GetExponentialBackoff(); e != nil {
			out.Retry.Initial = e.GetInitial().AsDuration()
			out.Retry.Max = e.GetMax().AsDuration()
			out.Retry.Multiplier = float64(e.GetMultiplier())
		}
		if cb := bp.GetCustomizedBackoff(); cb != nil {
			for _, d := range cb.GetNext() {
				out.Retry.Customized = append(out.Retry.Customized, d.AsDuration())
			}
		}
	}
	if p := s.GetPublishing(); p != nil {
		out.MaxBodySize = int(p.GetMaxBodySize())
		out.ValidateMessageType = p.GetValidateMessageType()
	}
	if sub := s.GetSubscription(); sub != nil {
		out.FIFO = sub.GetFifo()
		out.ReceiveBatchSize = int(sub.GetReceiveBatchSize())
		out.LongPollingTimeout = sub.GetLongPollingTimeout().AsDuration()
	}
	return out
}

// localSettings builds the Settings this client announces to ep.
func (c *Client) localSettings(ep *endpoint) *rmqpb.Settings {
	ct := c.cfg.Type.pb()
	s := &rmqpb.Settings{
		ClientType:     &ct,
		AccessPoint:    ep.pbep,
		RequestTimeout: durationpb.New(c.cfg.RequestTimeout),
		UserAgent: &rmqpb.UA{
			Language: rmqpb.Language_GOLANG,
			Version:  ClientVersion,
			Platform: c.platform,
			Hostname: c.hostname,
		},
	}
	c.pubsubMu.Lock()
	defer c.pubsubMu.Unlock()
	if c.cfg.Type == Producer {
		pub := &rmqpb.Publishing{Topics: make([]*rmqpb.Resource, 0, len(c.topics))}
		for _, t := range c.topics {
			pub.Topics = append(pub.Topics, c.resource(t))
		}
		s.PubSub = &rmqpb.Settings_Publishing{Publishing: pub}
		return s
	}
	sub := &rmqpb.Subscription{Group: c.groupResource()}
	for _, e := range c.subs {
		sub.Subscriptions = append(sub.Subscriptions, &rmqpb.SubscriptionEntry{
			Topic:      c.resource(e.Topic),
			Expression: e.Filter.pb(),
		})
	}
	if c.cfg.Type == SimpleConsumer {
		sub.LongPollingTimeout = durationpb.New(c.cfg.LongPollingTimeout)
	}
	s.PubSub = &rmqpb.Settings_Subscription{Subscription: sub}
	return s
}
