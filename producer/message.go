package producer

import "time"

// Message is one message to send. Only Topic and Body are required.
//
// The producer does not modify a Message and does not keep it after the send
// has completed, but it reads it until then: do not change a Message (or its
// Body) while a send of it is in flight.
type Message struct {
	// Topic is the logic topic; the configuration maps it to a physical
	// topic on each of its clusters.
	Topic string
	// Body is the payload; it must not be empty.
	Body []byte
	// Tag is the RocketMQ tag consumers filter on (optional).
	Tag string
	// Keys are the RocketMQ message keys used for lookup (optional).
	Keys []string
	// Properties are user properties. Keys that RocketMQ reserves, and the
	// lane key, are refused with ErrReservedProperty.
	Properties map[string]string
	// MessageGroup makes the message a FIFO message: messages of one group
	// are sent in the order Send was called for them, batch only with each
	// other, and have at most one batch in flight.
	MessageGroup string
	// DeliveryTime, when set, makes the message a delayed message that
	// consumers see at that time. Delayed messages are always sent alone,
	// because RocketMQ brokers apply the timer only to single messages.
	DeliveryTime time.Time
}

// size is the number of bytes the message counts for in batch accounting:
// the body plus properties, tag and keys, which travel with it.
func (m *Message) size() int {
	n := len(m.Body) + len(m.Tag) + len(m.MessageGroup)
	for _, k := range m.Keys {
		n += len(k)
	}
	for k, v := range m.Properties {
		n += len(k) + len(v)
	}
	return n
}

// SendResult describes where one message was stored.
type SendResult struct {
	// MessageID is the id the producer generated for the message; it is
	// the id consumers see.
	MessageID string
	// Topic is the logic topic the message was sent to.
	Topic string
	// Cluster is the name of the cluster that stored the message.
	Cluster string
	// PhysicalTopic is the RocketMQ topic on that cluster.
	PhysicalTopic string
	// Endpoint is the broker endpoint the message was sent to.
	Endpoint string
	// QueueID is the queue the producer addressed. A RocketMQ proxy may
	// pick another queue; the offset is then in the queue it picked.
	QueueID int32
	// Offset is the message's queue offset (for a batch, the first offset
	// plus the message's index in it). For a delayed message it is the
	// position the broker gave the message while it waits for its time,
	// not a position in the topic's queue; for a transactional message it
	// is the half message's position in the broker's half topic: a commit
	// stores the message in its queue anew, at an offset of its own.
	Offset int64
	// Lane is the lane stamped on the message ("" for the base lane).
	Lane string
	// Shadow is set when the message is shadow traffic: it was stamped
	// with the shadow mark and stored in PhysicalTopic, the cluster's
	// shadow topic.
	Shadow bool
	// Attempts is the number of send attempts it took (1 when the first
	// target took it).
	Attempts int
	// TransactionID is set for a transactional message.
	TransactionID string
}
