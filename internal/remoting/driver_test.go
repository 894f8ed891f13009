package remoting

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

func newTestProducerClient(t *testing.T, cfg ProducerConfig) *ProducerClient {
	t.Helper()
	if cfg.NameServers == nil {
		cfg.NameServers = []string{"127.0.0.1:1"}
	}
	p, err := NewProducerClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func msgs(topic string, sizes ...int) []*driver.Message {
	var out []*driver.Message
	for i, n := range sizes {
		out = append(out, &driver.Message{Topic: topic, ID: "ID" + strconv.Itoa(i), Body: make([]byte, n), QueueID: 1})
	}
	return out
}

// A send the broker wrote but could not flush or replicate in time is a
// timeout that the producer must not resend (driver.Retryable is false):
// resending would store it twice. A plain busy broker is retryable.
func TestStoredRefusalIsNotRetryable(t *testing.T) {
	var code atomic.Int32
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		return &wire.Header{Code: code.Load(), Remark: "as told"}
	})
	p := newTestProducerClient(t, ProducerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	code.Store(wire.RespFlushDiskTimeout)
	_, err := p.SendInto(ctx, srv.addr(), msgs("t", 1), nil)
	require.ErrorIs(t, err, rmqerr.ErrTimeout)
	require.False(t, driver.Retryable(err), "a stored message is not resent")

	code.Store(wire.RespSystemBusy)
	_, err = p.SendInto(ctx, srv.addr(), msgs("t", 1), nil)
	require.ErrorIs(t, err, rmqerr.ErrThrottled)
	require.True(t, driver.Retryable(err))
}

// A broker that does not answer in time: the error is a timeout wrapping
// the context's error, which the producer reads as "may have been stored".
func TestSendTimeoutWrapsTheDeadline(t *testing.T) {
	srv := newFakeServer(t, wire.JSON, func(net.Conn, *wire.Command) *wire.Header { return nil })
	p := newTestProducerClient(t, ProducerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.SendInto(ctx, srv.addr(), msgs("t", 1), nil)
	require.ErrorIs(t, err, rmqerr.ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A batch is sent as SEND_BATCH_MESSAGE requests of at most MaxBody bytes
// of bodies; when a later part fails, its messages carry the error and the
// earlier part's results stand (the producer resends only the failed
// ones). A body over MaxBody is refused before anything is sent.
func TestBatchSplitsAtMaxBody(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []int32
	)
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		mu.Lock()
		calls = append(calls, req.Code)
		n := len(calls)
		mu.Unlock()
		if n == 3 {
			return &wire.Header{Code: wire.RespSystemBusy, Remark: "busy"}
		}
		return &wire.Header{Ext: map[string]string{wire.RespQueueID: "1", wire.RespQueueOffset: strconv.Itoa(100 * n), wire.RespMsgID: "x"}}
	})
	p := newTestProducerClient(t, ProducerConfig{MaxBody: 100})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	_, err := p.SendInto(ctx, srv.addr(), msgs("t", 10, 101), nil)
	require.ErrorIs(t, err, rmqerr.ErrTooLarge)
	mu.Lock()
	require.Empty(t, calls, "nothing is sent")
	mu.Unlock()

	res, err := p.SendInto(ctx, srv.addr(), msgs("t", 60, 40, 50, 50, 70), nil)
	require.NoError(t, err)
	require.Len(t, res, 5)
	mu.Lock()
	require.Equal(t, []int32{wire.CodeSendBatchMessage, wire.CodeSendBatchMessage, wire.CodeSendBatchMessage}, calls)
	mu.Unlock()
	require.NoError(t, res[0].Err)
	require.Equal(t, int64(100), res[0].Offset)
	require.Equal(t, int64(101), res[1].Offset)
	require.Equal(t, "ID1", res[1].MessageID)
	require.NoError(t, res[2].Err)
	require.Equal(t, int64(200), res[2].Offset)
	require.Equal(t, int64(201), res[3].Offset)
	require.ErrorIs(t, res[4].Err, rmqerr.ErrThrottled)
	require.Equal(t, "ID4", res[4].MessageID)
}

// A closed client answers driver.ErrClosed, which the producer reads as "a
// successor takes over".
func TestClosedProducerClient(t *testing.T) {
	p := newTestProducerClient(t, ProducerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.Close(ctx))
	_, err := p.SendInto(ctx, "127.0.0.1:1", msgs("t", 1), nil)
	require.ErrorIs(t, err, driver.ErrClosed)
	_, err = p.Route(ctx, "127.0.0.1:1", "t")
	require.ErrorIs(t, err, driver.ErrClosed)
}

// The offsets END_TRANSACTION needs travel in the transaction id; the
// commit log offset is the one the send result read out of the broker's
// offset message id.
func TestTransactionIDCarriesOffsets(t *testing.T) {
	p := &ProducerClient{}
	r := p.result(SendResult{ID: "UNIQ", CommitLogOffset: 0x1234, QueueOffset: 7, TransactionID: "tx:1"}, true)
	q, l, id, err := parseTxID(r.TransactionID)
	require.NoError(t, err)
	require.Equal(t, int64(7), q)
	require.Equal(t, int64(0x1234), l)
	require.Equal(t, "tx:1", id)
	_, _, _, err = parseTxID("garbage")
	require.ErrorIs(t, err, rmqerr.ErrBadRequest)
	require.True(t, errors.Is(err, ErrInvalidMessage))
}

// A cluster without name servers is refused.
func TestProducerClientNeedsANameServer(t *testing.T) {
	_, err := NewProducerClient(ProducerConfig{})
	require.ErrorIs(t, err, ErrNoNameServer)
}

// A name server's route in the driver's terms: one queue per id up to the
// larger of the read and write counts, each with the permission its perm
// bits and counts give, served by the broker set's master.
func TestConvertRoute(t *testing.T) {
	rr, err := ParseRoute([]byte(`{"brokerDatas":[
		{"brokerName":"b1","cluster":"c","brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}},
		{"brokerName":"b2","cluster":"c","brokerAddrs":{0:"10.0.0.3:10911"}},
		{"brokerName":"b3","cluster":"c","brokerAddrs":{1:"10.0.0.4:10911"}}],
		"queueDatas":[
		{"brokerName":"b2","perm":4,"readQueueNums":1,"writeQueueNums":1},
		{"brokerName":"b1","perm":6,"readQueueNums":2,"writeQueueNums":3},
		{"brokerName":"b3","perm":6,"readQueueNums":1,"writeQueueNums":1}]}`))
	require.NoError(t, err)
	r, names := convertRoute("t", "ns:9876", rr)
	require.Equal(t, map[string]string{"10.0.0.1:10911": "b1", "10.0.0.3:10911": "b2"}, names, "a broker set without a master is left out")
	require.Equal(t, []driver.Queue{
		{Topic: "t", ID: 0, Permission: driver.PermReadWrite, Broker: "b1", Endpoint: "10.0.0.1:10911"},
		{Topic: "t", ID: 1, Permission: driver.PermReadWrite, Broker: "b1", Endpoint: "10.0.0.1:10911"},
		{Topic: "t", ID: 2, Permission: driver.PermWrite, Broker: "b1", Endpoint: "10.0.0.1:10911"},
		{Topic: "t", ID: 0, Permission: driver.PermRead, Broker: "b2", Endpoint: "10.0.0.3:10911"},
	}, r.Queues)
	require.Len(t, r.WritableQueues(), 3)
	require.Equal(t, "ns:9876", r.AccessPoint)
}

// A broker asking about many half messages at once runs at most
// maxConcurrentChecks checker calls; the rest are left for the broker to
// ask again.
func TestTransactionChecksAreBounded(t *testing.T) {
	release := make(chan struct{})
	var running, most atomic.Int32
	p, err := NewProducerClient(ProducerConfig{NameServers: []string{"127.0.0.1:1"},
		OnOrphanedTransaction: func(ctx context.Context, _ string, _ *driver.ReceivedMessage, _ string) driver.TransactionResolution {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return driver.TransactionUnknown
		}})
	require.NoError(t, err)
	defer func() { _ = p.Close(context.Background()) }()
	body, err := wire.AppendMessageExt(nil, &wire.MessageExt{Topic: "t", BornHost: "127.0.0.1:1", StoreHost: "127.0.0.1:2",
		SysFlag: wire.SysTransactionPrepare, Body: []byte("x"), Properties: map[string]string{}})
	require.NoError(t, err)
	req := &wire.Command{Header: wire.Header{Code: wire.CodeCheckTransactionState, Flag: wire.FlagOneway,
		Ext: map[string]string{"msgId": "M", "transactionId": "T", "commitLogOffset": "1", "tranStateTableOffset": "1"}}, Body: body}
	var wg sync.WaitGroup
	for range 3 * maxConcurrentChecks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.handle(context.Background(), "127.0.0.1:2", req)
		}()
	}
	require.Eventually(t, func() bool { return running.Load() == maxConcurrentChecks }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.Equal(t, int32(maxConcurrentChecks), most.Load())
}
