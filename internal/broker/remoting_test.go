package broker

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// rawRemoting sends one request on a fresh connection and returns the
// answer.
func rawRemoting(t *testing.T, addr string, h *wire.Header, body []byte, st wire.SerializeType) *wire.Command {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	h.Opaque = 41
	f, err := wire.AppendFrame(nil, h, body, st)
	require.NoError(t, err)
	_, err = c.Write(f)
	require.NoError(t, err)
	resp, err := wire.ReadFrame(c, 0)
	require.NoError(t, err)
	require.True(t, resp.IsResponse())
	require.Equal(t, int32(41), resp.Opaque)
	require.Equal(t, st, resp.Serialize, "answered in the request's serialization")
	return resp
}

func remotingSendHeader(topic, props string) *wire.Header {
	return &wire.Header{Code: wire.CodeSendMessageV2, Ext: map[string]string{
		wire.SendProducerGroup: "pg", wire.SendTopic: topic, wire.SendQueueID: "1",
		wire.SendBornTimestamp: strconv.FormatInt(time.Now().UnixMilli(), 10), wire.SendProperties: props,
	}}
}

func TestRemotingServerAnswers(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.RemotingListen = "127.0.0.1:0"
	b := startBroker(t, cfg)
	addr := b.RemotingAddr()
	require.NotEmpty(t, addr)

	for _, st := range []wire.SerializeType{wire.JSON, wire.RocketMQ} {
		// A plain send lands in the queue named, with the client's id.
		resp := rawRemoting(t, addr, remotingSendHeader("normal", "UNIQ_KEY\x01ID-1\x02TAGS\x01a\x02"), []byte("x"), st)
		require.Equal(t, wire.RespSuccess, resp.Code, resp.Remark)
		require.Equal(t, "ID-1", resp.Ext[wire.RespMsgID])
		require.Equal(t, "1", resp.Ext[wire.RespQueueID])

		// A delay level is refused, never turned into some delay silently.
		resp = rawRemoting(t, addr, remotingSendHeader("normal", "DELAY\x013\x02"), []byte("x"), st)
		require.Equal(t, wire.RespMessageIllegal, resp.Code)
		require.Contains(t, resp.Remark, "TIMER_DELIVER_MS")

		// A topic the broker lacks.
		resp = rawRemoting(t, addr, remotingSendHeader("nope", ""), []byte("x"), st)
		require.Equal(t, wire.RespTopicNotExist, resp.Code)

		// A batch body that does not decode.
		h := remotingSendHeader("normal", "")
		h.Code = wire.CodeSendBatchMessage
		resp = rawRemoting(t, addr, h, []byte{0, 0, 0, 99, 1}, st)
		require.Equal(t, wire.RespMessageIllegal, resp.Code)

		// A request code the broker does not serve.
		resp = rawRemoting(t, addr, &wire.Header{Code: 11}, nil, st)
		require.Equal(t, wire.RespRequestCodeNotSupported, resp.Code)

		// An end transaction naming no half message.
		resp = rawRemoting(t, addr, &wire.Header{Code: wire.CodeEndTransaction, Ext: map[string]string{"transactionId": "bogus", "commitOrRollback": "8"}}, nil, st)
		require.NotEqual(t, wire.RespSuccess, resp.Code)
	}

	// A garbage frame closes that connection only; the server keeps serving.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, _ = c.Write([]byte{0, 0, 0, 5, 9, 9, 9, 9, 9})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err)
	_ = c.Close()
	resp := rawRemoting(t, addr, remotingSendHeader("normal", "UNIQ_KEY\x01ID-2\x02"), []byte("x"), wire.JSON)
	require.Equal(t, wire.RespSuccess, resp.Code)
}

// Sends held on one connection (here by a pause, as a send waiting for a
// flush is held) hold up neither the requests behind them on the same
// connection nor their answers: more sends than the connection keeps
// workers are held, a heartbeat sent after them is answered at once, and
// every send is answered, stored, once released.
func TestRemotingHeldSendsDoNotStallTheConnection(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.RemotingListen = "127.0.0.1:0"
	cfg.Faults = &Faults{}
	b := startBroker(t, cfg)
	c, err := net.DialTimeout("tcp", b.RemotingAddr(), 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))

	cfg.Faults.Pause()
	defer cfg.Faults.Resume()
	const held = 3 * remKeptWorkers
	var frames []byte
	for i := range held {
		h := remotingSendHeader("normal", "UNIQ_KEY\x01HELD-"+strconv.Itoa(i)+"\x02")
		h.Opaque = int32(1 + i)
		frames, err = wire.AppendFrame(frames, h, []byte("x"), wire.JSON)
		require.NoError(t, err)
	}
	frames, err = wire.AppendFrame(frames, &wire.Header{Code: wire.CodeHeartbeat, Opaque: 1000},
		[]byte(`{"clientID":"c","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[]}`), wire.JSON)
	require.NoError(t, err)
	_, err = c.Write(frames)
	require.NoError(t, err)

	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := wire.ReadFrame(c, 0)
	require.NoError(t, err, "the heartbeat behind held sends is answered")
	require.Equal(t, int32(1000), resp.Opaque)
	require.Equal(t, wire.RespSuccess, resp.Code, resp.Remark)

	cfg.Faults.Resume()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	seen := map[int32]bool{}
	for range held {
		resp, err := wire.ReadFrame(c, 0)
		require.NoError(t, err)
		require.Equal(t, wire.RespSuccess, resp.Code, resp.Remark)
		require.Equal(t, "HELD-"+strconv.Itoa(int(resp.Opaque-1)), resp.Ext[wire.RespMsgID])
		seen[resp.Opaque] = true
	}
	require.Len(t, seen, held)
}
