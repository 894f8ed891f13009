package remoting

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/twinmq/twinmq/rmqerr"
)

// Permission bits of a queue (PermName.java).
const (
	PermWrite = 2
	PermRead  = 4
)

// MasterID is the broker id of a master in brokerAddrs.
const MasterID = 0

// BrokerData is one broker set of a route: its addresses by broker id.
type BrokerData struct {
	Cluster string
	Name    string
	Addrs   map[int64]string
}

// QueueData is a broker's queues of the topic.
type QueueData struct {
	BrokerName     string
	ReadQueueNums  int
	WriteQueueNums int
	Perm           int
	TopicSysFlag   int
}

// Route is a topic's route as the name server gives it.
type Route struct {
	Brokers []BrokerData
	Queues  []QueueData
}

// WriteQueue is a queue a producer may send to.
type WriteQueue struct {
	BrokerName string
	Addr       string // the master's address
	QueueID    int32
}

// WriteQueues lists the writable queues of the route's masters, ordered by
// broker name and queue id.
func (r *Route) WriteQueues() []WriteQueue {
	addr := map[string]string{}
	for _, b := range r.Brokers {
		if a, ok := b.Addrs[MasterID]; ok {
			addr[b.Name] = a
		}
	}
	qs := append([]QueueData(nil), r.Queues...)
	sort.Slice(qs, func(i, j int) bool { return qs[i].BrokerName < qs[j].BrokerName })
	var out []WriteQueue
	for _, q := range qs {
		a, ok := addr[q.BrokerName]
		if !ok || q.Perm&PermWrite == 0 {
			continue
		}
		for i := range q.WriteQueueNums {
			out = append(out, WriteQueue{BrokerName: q.BrokerName, Addr: a, QueueID: int32(i)})
		}
	}
	return out
}

// BrokerAddr returns the master address of the named broker.
func (r *Route) BrokerAddr(name string) (string, bool) {
	for _, b := range r.Brokers {
		if b.Name == name {
			a, ok := b.Addrs[MasterID]
			return a, ok
		}
	}
	return "", false
}

// ParseRoute reads TopicRouteData as a name server writes it, tolerating
// fastjson's unquoted integer map keys ({0:"host:port"}).
func ParseRoute(b []byte) (*Route, error) {
	var raw struct {
		BrokerDatas []struct {
			Cluster     string            `json:"cluster"`
			BrokerName  string            `json:"brokerName"`
			BrokerAddrs map[string]string `json:"brokerAddrs"`
		} `json:"brokerDatas"`
		QueueDatas []struct {
			BrokerName     string `json:"brokerName"`
			ReadQueueNums  int    `json:"readQueueNums"`
			WriteQueueNums int    `json:"writeQueueNums"`
			Perm           int    `json:"perm"`
			TopicSysFlag   int    `json:"topicSysFlag"`
		} `json:"queueDatas"`
	}
	if err := json.Unmarshal(QuoteNumericKeys(b), &raw); err != nil {
		return nil, fmt.Errorf("remoting: route data: %w: %w", rmqerr.ErrInternal, err)
	}
	r := &Route{}
	for _, bd := range raw.BrokerDatas {
		d := BrokerData{Cluster: bd.Cluster, Name: bd.BrokerName, Addrs: map[int64]string{}}
		for k, v := range bd.BrokerAddrs {
			id, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("remoting: route data: %w: broker id %q", rmqerr.ErrInternal, k)
			}
			d.Addrs[id] = v
		}
		r.Brokers = append(r.Brokers, d)
	}
	for _, q := range raw.QueueDatas {
		r.Queues = append(r.Queues, QueueData(q))
	}
	return r, nil
}

// QuoteNumericKeys rewrites object keys that are bare numbers (fastjson's
// output for a map with integer keys) as strings, leaving everything else,
// string contents included, untouched. Input that is not JSON stays not
// JSON.
func QuoteNumericKeys(b []byte) []byte {
	var out []byte
	inStr, esc := false, false
	expectKey := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			out = append(out, c)
			continue
		}
		switch c {
		case '"':
			inStr, expectKey = true, false
		case '{', ',':
			expectKey = true
			out = append(out, c)
			continue
		case ' ', '\t', '\n', '\r':
			out = append(out, c)
			continue
		}
		if expectKey && (c == '-' || (c >= '0' && c <= '9')) {
			j := i + 1
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			k := j
			for k < len(b) && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
				k++
			}
			if k < len(b) && b[k] == ':' {
				out = append(out, '"')
				out = append(out, b[i:j]...)
				out = append(out, '"')
				i = j - 1
				expectKey = false
				continue
			}
		}
		expectKey = false
		out = append(out, c)
	}
	return out
}
