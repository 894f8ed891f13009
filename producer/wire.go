package producer

import (
	"context"

	"github.com/twinmq/twinmq/internal/driver"
)

// wireClient is what the producer asks of a RocketMQ client: the gRPC
// driver's *driver.Client and the remoting driver's
// *remoting.ProducerClient both are one, in internal/driver's vocabulary
// (driver.Message, driver.SendResult, driver.Route). A cluster's protocol
// chooses which (see newClient); nothing else of the producer knows a wire.
type wireClient interface {
	// Route returns the route of topic as accessPoint (a proxy, or a name
	// server) gives it, cached and refreshed by the client.
	Route(ctx context.Context, accessPoint, topic string) (*driver.Route, error)
	// SendInto sends msgs (one topic, one queue) to the broker at endpoint
	// in one request, the results appended to into[:0].
	SendInto(ctx context.Context, endpoint string, msgs []*driver.Message, into []driver.SendResult) ([]driver.SendResult, error)
	// Heartbeat probes endpoint.
	Heartbeat(ctx context.Context, endpoint string) error
	// EndTransaction commits or rolls back a half message at the endpoint
	// that stored it.
	EndTransaction(ctx context.Context, endpoint, topic, messageID, txID string, r driver.TransactionResolution) error
	// EndpointState reports the client's link to endpoint.
	EndpointState(endpoint string) driver.EndpointState
	// SetTopics names the physical topics the client publishes.
	SetTopics(topics []string) error
	// Close says goodbye to the servers and releases everything.
	Close(ctx context.Context) error
}

var _ wireClient = (*driver.Client)(nil)
