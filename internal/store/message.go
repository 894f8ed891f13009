package store

// Message is what a producer hands to the store. The store keeps every field
// and gives it back unchanged on Read.
type Message struct {
	Topic   string
	QueueID int32
	// Flags are opaque to the store; upper layers (transactions, timers) use
	// them.
	Flags uint32
	// BornTimestamp is when the producer made the message, unix ms.
	BornTimestamp int64
	BornHost      string
	// Tag is kept in the record; its hash goes into the consume queue so a
	// consumer can filter by tag without reading the log.
	Tag            string
	ReconsumeTimes int32
	Properties     map[string]string
	Body           []byte
}

// StoredMessage is a message as read back, with where the store put it.
type StoredMessage struct {
	Message
	QueueOffset    int64 // offset within (Topic, QueueID)
	LogOffset      int64 // offset of the record in the commit log
	StoreTimestamp int64 // unix ms, when the store appended it
	Size           int32 // size of the record in the log
}

// Durability says what an append result is guaranteed to survive.
type Durability int

const (
	// Buffered: written to the file (page cache); survives a process crash,
	// not a power loss until the next periodic flush.
	Buffered Durability = iota
	// Flushed: an fsync covered the append; survives a power loss.
	Flushed
)

func (d Durability) String() string {
	if d == Flushed {
		return "flushed"
	}
	return "buffered"
}

// AppendResult describes one successful Append.
type AppendResult struct {
	Topic          string
	QueueID        int32
	FirstOffset    int64 // queue offset of the first message; the rest follow contiguously
	Count          int
	LogOffset      int64 // log offset of the first record
	StoreTimestamp int64
	Durability     Durability
}
