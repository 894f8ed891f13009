package remoting

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// A send answered as RocketMQ 4.9.7 answers it: msgId is the offset
// message id (store host, commit log offset), no transactionId, the
// broker's version in the header. The result carries the commit log
// offset END_TRANSACTION needs (without it a real broker cannot find the
// half message and the commit is lost), the message's own id as the
// transaction id (4.x brokers take it from the client), and the version.
func TestSendResultAsRocketMQ4Answers(t *testing.T) {
	offsetID := "7F00000100002AE3" + "0000000000ABCDEF" // 127.0.0.1:10979, offset 0xABCDEF
	var gotTx *wire.Command
	endSeen := make(chan struct{})
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		switch req.Code {
		case wire.CodeSendMessageV2:
			return &wire.Header{Code: wire.RespSuccess, Version: int32(V4_9_7), Ext: map[string]string{
				wire.RespMsgID: offsetID, wire.RespQueueID: "1", wire.RespQueueOffset: "9"}}
		case wire.CodeEndTransaction:
			gotTx = req
			close(endSeen)
		}
		return nil
	})
	c := New()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := &Message{Topic: "t", Transaction: true, Body: []byte("x")}
	r, err := c.Send(ctx, NewIDGenerator(), SendTarget{Addr: srv.addr(), BrokerName: "b", QueueID: 1, ProducerGroup: "g"}, m)
	require.NoError(t, err)
	require.Equal(t, int64(0xABCDEF), r.CommitLogOffset)
	require.Equal(t, m.ID, r.TransactionID)
	require.Equal(t, V4_9_7, r.BrokerVersion)
	require.False(t, r.BrokerVersion.HasTimer())
	require.NoError(t, c.EndTransaction(ctx, EndTransaction{Addr: srv.addr(), ProducerGroup: "g", Topic: "t", MessageID: m.ID,
		TransactionID: r.TransactionID, QueueOffset: r.QueueOffset, CommitLogOff: r.CommitLogOffset, Resolution: Commit}))
	select {
	case <-endSeen:
	case <-ctx.Done():
		t.Fatal("no END_TRANSACTION")
	}
	require.Equal(t, strconv.Itoa(0xABCDEF), gotTx.Ext["commitLogOffset"])
	require.Equal(t, "9", gotTx.Ext["tranStateTableOffset"])
	require.Equal(t, m.ID, gotTx.Ext["transactionId"])
}

// A 5.x broker names the transaction itself; that id is kept.
func TestSendResultKeepsBrokerTransactionID(t *testing.T) {
	srv := newFakeServer(t, wire.RocketMQ, func(_ net.Conn, req *wire.Command) *wire.Header {
		return &wire.Header{Code: wire.RespSuccess, Version: int32(V5_4_0), Ext: map[string]string{
			wire.RespMsgID: "7F00000100002A9F0000000000000010", wire.RespQueueID: "0", wire.RespQueueOffset: "3", wire.RespTxID: "TX-1"}}
	})
	c := New()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Send(ctx, NewIDGenerator(), SendTarget{Addr: srv.addr(), ProducerGroup: "g"}, &Message{Topic: "t", Transaction: true, Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, "TX-1", r.TransactionID)
	require.Equal(t, int64(16), r.CommitLogOffset)
	require.True(t, r.BrokerVersion.HasTimer())
}

// A broker that answers the client's own id (the embedded broker) gives no
// commit log offset, though the id has the shape of an offset id.
func TestSendResultOfTheClientsOwnIDHasNoOffset(t *testing.T) {
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		props := wire.DecodeProperties(req.Ext[wire.SendProperties])
		return &wire.Header{Code: wire.RespSuccess, Ext: map[string]string{
			wire.RespMsgID: props[wire.PropUniqKey], wire.RespQueueID: "0", wire.RespQueueOffset: "3"}}
	})
	c := New()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Send(ctx, NewIDGenerator(), SendTarget{Addr: srv.addr(), ProducerGroup: "g"}, &Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, r.ID, r.OffsetID)
	require.Zero(t, r.CommitLogOffset)
}

// Pull sends what RocketMQ's PullMessageRequestHeader requires and decodes
// the stored messages of the response with their properties.
func TestPullDecodesStoredMessages(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	reqs := make(chan *wire.Command, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		req, err := wire.ReadFrame(nc, 0)
		if err != nil {
			return
		}
		reqs <- req
		var body []byte
		for i := range 2 {
			body, _ = wire.AppendMessageExt(body, &wire.MessageExt{Topic: "t", QueueID: 2, QueueOffset: int64(5 + i),
				BornHost: "127.0.0.1:1", StoreHost: "127.0.0.1:2", Body: []byte("m" + strconv.Itoa(i)),
				Properties: map[string]string{wire.PropUniqKey: "ID" + strconv.Itoa(i), wire.PropTags: "tg", "lane": "canary"}})
		}
		f, _ := wire.AppendFrame(nil, &wire.Header{Code: wire.RespSuccess, Opaque: req.Opaque, Flag: wire.FlagResponse,
			Ext: map[string]string{"nextBeginOffset": "7", "minOffset": "0", "maxOffset": "7", "suggestWhichBrokerId": "0"}}, body, wire.JSON)
		_, _ = nc.Write(f)
		_, _ = wire.ReadFrame(nc, 0) // until the client closes
	}()
	c := New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Pull(ctx, PullRequest{Addr: lis.Addr().String(), Topic: "t", QueueID: 2, Offset: 5, ConsumerGroup: "g"})
	require.NoError(t, err)
	require.NoError(t, c.Close())
	<-done
	req := <-reqs
	for _, k := range []string{"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subVersion"} {
		require.NotEmpty(t, req.Ext[k], "PullMessageRequestHeader.%s is required", k)
	}
	require.Equal(t, "5", req.Ext["queueOffset"])
	require.Equal(t, PullFound, res.Status)
	require.Equal(t, int64(7), res.NextOffset)
	require.Len(t, res.Messages, 2)
	require.Equal(t, "ID1", res.Messages[1].Properties[wire.PropUniqKey])
	require.Equal(t, "canary", res.Messages[1].Properties["lane"])
	require.Equal(t, int64(6), res.Messages[1].QueueOffset)
	require.Equal(t, []byte("m1"), res.Messages[1].Body)
}

// The pull statuses that are not errors, and one that is.
func TestPullStatuses(t *testing.T) {
	codes := map[int32]PullStatus{wire.RespPullNotFound: PullNoNewMessage, wire.RespPullRetryImmediately: PullRetry, wire.RespPullOffsetMoved: PullOffsetIllegal}
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		code, _ := strconv.Atoi(req.Ext["consumerGroup"])
		return &wire.Header{Code: int32(code), Ext: map[string]string{"nextBeginOffset": "4", "minOffset": "0", "maxOffset": "4"}}
	})
	c := New()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for code, st := range codes {
		res, err := c.Pull(ctx, PullRequest{Addr: srv.addr(), Topic: "t", ConsumerGroup: strconv.Itoa(int(code))})
		require.NoError(t, err)
		require.Equal(t, st, res.Status)
		require.Equal(t, int64(4), res.NextOffset)
	}
	_, err := c.Pull(ctx, PullRequest{Addr: srv.addr(), Topic: "t", ConsumerGroup: strconv.Itoa(int(wire.RespTopicNotExist))})
	var re *ResponseError
	require.ErrorAs(t, err, &re)
	require.Equal(t, wire.RespTopicNotExist, re.Code)
}

// A batch's own properties carry WAIT only: a broker appends them to each
// stored message, and a joined UNIQ_KEY there replaced every message's id
// on RocketMQ 4.9.7. Each message keeps its own id in its own properties.
func TestBatchHeaderCarriesNoIDs(t *testing.T) {
	reqs := make(chan *wire.Command, 1)
	srv := newFakeServer(t, wire.JSON, func(_ net.Conn, req *wire.Command) *wire.Header {
		reqs <- req
		return &wire.Header{Code: wire.RespSuccess, Ext: map[string]string{wire.RespMsgID: "a,b", wire.RespQueueID: "0", wire.RespQueueOffset: "0"}}
	})
	c := New()
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs := []*Message{{Topic: "t", Body: []byte("1")}, {Topic: "t", Body: []byte("2")}}
	_, err := c.SendBatch(ctx, NewIDGenerator(), SendTarget{Addr: srv.addr(), ProducerGroup: "g"}, msgs)
	require.NoError(t, err)
	req := <-reqs
	require.Equal(t, map[string]string{wire.PropWait: "true"}, wire.DecodeProperties(req.Ext[wire.SendProperties]))
	bm, err := wire.DecodeBatch(req.Body)
	require.NoError(t, err)
	for i, m := range bm {
		require.Equal(t, msgs[i].ID, wire.DecodeProperties(m.Properties)[wire.PropUniqKey])
	}
}

// A tag with '|' is refused before it is sent: RocketMQ brokers store it,
// and no subscription could select it.
func TestTagWithSeparatorRefused(t *testing.T) {
	_, err := (&Message{Topic: "t", Tag: "a|b", Body: []byte("x")}).appendProperties(nil, "g", true)
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.ErrorIs(t, err, rmqerr.ErrBadRequest)
}
