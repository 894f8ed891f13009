package store

// queueTable maps the queue ids of one topic to values. Queue ids are small
// dense integers in practice (0..N-1), so ids below denseLimit live in a
// slice: with ten thousand queues a lookup is one index instead of a hash
// probe into a table too big for the CPU cache, which is what keeps many
// queues as cheap as few on the append and index paths.
type queueTable[V any] struct {
	dense  []V
	sparse map[int32]*V
}

const denseLimit = 1 << 16

// at returns the slot of id, creating a zero one. The pointer is valid until
// the next call that creates a slot.
func (t *queueTable[V]) at(id int32) *V {
	if id >= 0 && id < denseLimit {
		if int(id) >= len(t.dense) {
			n := max(int(id)+1, 2*len(t.dense), 16)
			grown := make([]V, min(n, denseLimit))
			copy(grown, t.dense)
			t.dense = grown
		}
		return &t.dense[id]
	}
	if t.sparse == nil {
		t.sparse = map[int32]*V{}
	}
	v := t.sparse[id]
	if v == nil {
		v = new(V)
		t.sparse[id] = v
	}
	return v
}

// topicTable is a queueTable per topic.
type topicTable[V any] map[string]*queueTable[V]

func (m topicTable[V]) at(topic string, id int32) *V {
	t := m[topic]
	if t == nil {
		t = &queueTable[V]{}
		m[topic] = t
	}
	return t.at(id)
}
