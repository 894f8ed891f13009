package remoting

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// What a RocketMQ name server writes with fastjson: integer map keys
// unquoted, a colon and braces inside a string value left alone.
const fastjsonRoute = `{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b-a","cluster":"c"},` +
	`{"brokerAddrs":{ 0 :"10.0.0.2:10911"},"brokerName":"b-b","cluster":"c"}],"filterServerTable":{},` +
	`"queueDatas":[{"brokerName":"b-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2},` +
	`{"brokerName":"b-a","perm":4,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}],"orderTopicConf":"{1:\"x\"}"}`

func TestParseRouteFastjson(t *testing.T) {
	r, err := ParseRoute([]byte(fastjsonRoute))
	require.NoError(t, err)
	require.Len(t, r.Brokers, 2)
	require.Equal(t, "127.0.0.1:10921", r.Brokers[0].Addrs[1])
	a, ok := r.BrokerAddr("b-b")
	require.True(t, ok)
	require.Equal(t, "10.0.0.2:10911", a)
	// b-a is read-only: only b-b's two queues are writable.
	require.Equal(t, []WriteQueue{{"b-b", "10.0.0.2:10911", 0}, {"b-b", "10.0.0.2:10911", 1}}, r.WriteQueues())
	_, err = ParseRoute([]byte(`{"brokerDatas":[{"brokerAddrs":{"x":"a"}}]}`))
	require.ErrorIs(t, err, rmqerr.ErrInternal)
	require.Equal(t, `{"a":"{1:2}","1":[3]}`, string(QuoteNumericKeys([]byte(`{"a":"{1:2}",1:[3]}`))))
}

func FuzzQuoteNumericKeys(f *testing.F) {
	f.Add([]byte(fastjsonRoute))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = QuoteNumericKeys(b)
		_, _ = ParseRoute(b)
	})
}

// The first name server is down: the lookup fails over to the second and
// sticks to it; a topic it does not know is not found.
func TestNameServerFailover(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		if req.Ext["topic"] != "T" {
			return &wire.Header{Code: wire.RespTopicNotExist, Remark: "no topic"}
		}
		return &wire.Header{}
	})
	// The fake echoes the request body; route data rides in it.
	c := New(WithBackoff(time.Hour, time.Hour))
	defer c.Close()
	ns, err := NewNameServer(c, []string{deadAddr, srv.addr()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = ns.Route(ctx, "T")
	require.Error(t, err, "the fake's empty body is no route")
	require.Equal(t, int32(1), ns.cur.Load())
	_, err = ns.Route(ctx, "U")
	require.ErrorIs(t, err, rmqerr.ErrNotFound)
	var re *rmqerr.Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, rmqerr.CodeTopicNotFound, re.Code)
	_, err = NewNameServer(c, nil)
	require.ErrorIs(t, err, ErrNoNameServer)
}

// The refresher looks each topic up every interval and stops on Close.
func TestRefresher(t *testing.T) {
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		return &wire.Header{Code: wire.RespTopicNotExist, Remark: req.Ext["topic"]}
	})
	c := New()
	defer c.Close()
	ns, err := NewNameServer(c, []string{srv.addr()})
	require.NoError(t, err)
	got := make(chan error, 16)
	f := ns.Refresh(10*time.Millisecond, 5*time.Second, func() []string { return []string{"A", "B"} },
		func(topic string, r *Route, err error) {
			select {
			case got <- err:
			default:
			}
		})
	for range 4 {
		select {
		case err := <-got:
			require.ErrorIs(t, err, rmqerr.ErrNotFound)
		case <-time.After(10 * time.Second):
			t.Fatal("no refresh")
		}
	}
	f.Close()
	f.Close()
}
