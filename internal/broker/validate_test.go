package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func defaultLimits() *Limits {
	var l Limits
	l.fill()
	return &l
}

// sendCases are bad sends and the code the proxy answers them with.
func sendCases() []struct {
	name string
	req  func() *rmqpb.SendMessageRequest
	want rmqpb.Code
} {
	one := func(mod func(m *rmqpb.Message)) func() *rmqpb.SendMessageRequest {
		return func() *rmqpb.SendMessageRequest {
			m := msg("normal", "id-1", "body")
			mod(m)
			return &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}}
		}
	}
	manyProps := map[string]string{}
	for i := 0; i < 129; i++ {
		manyProps["k"+strings.Repeat("x", i)] = "v"
	}
	return []struct {
		name string
		req  func() *rmqpb.SendMessageRequest
		want rmqpb.Code
	}{
		{"no message", func() *rmqpb.SendMessageRequest { return &rmqpb.SendMessageRequest{} }, rmqpb.Code_MESSAGE_CORRUPTED},
		{"topics differ", func() *rmqpb.SendMessageRequest {
			return &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("normal", "a", "x"), msg("mixed", "b", "x")}}
		}, rmqpb.Code_MESSAGE_CORRUPTED},
		{"illegal topic", one(func(m *rmqpb.Message) { m.Topic = res("bad/topic") }), rmqpb.Code_ILLEGAL_TOPIC},
		{"blank topic", one(func(m *rmqpb.Message) { m.Topic = nil }), rmqpb.Code_ILLEGAL_TOPIC},
		{"topic too long", one(func(m *rmqpb.Message) { m.Topic = res(strings.Repeat("t", 128)) }), rmqpb.Code_ILLEGAL_TOPIC},
		{"system topic", one(func(m *rmqpb.Message) { m.Topic = res("rmq_sys_x") }), rmqpb.Code_ILLEGAL_TOPIC},
		{"retry topic", one(func(m *rmqpb.Message) { m.Topic = res("%RETRY%g1") }), rmqpb.Code_ILLEGAL_TOPIC},
		{"reserved key", one(func(m *rmqpb.Message) { m.UserProperties = map[string]string{"UNIQ_KEY": "x"} }), rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY},
		{"control char in property", one(func(m *rmqpb.Message) { m.UserProperties = map[string]string{"k": "a\x01"} }), rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY},
		{"blank message id", one(func(m *rmqpb.Message) { m.SystemProperties.MessageId = " " }), rmqpb.Code_ILLEGAL_MESSAGE_ID},
		{"blank tag", one(func(m *rmqpb.Message) { m.SystemProperties.Tag = proto.String("  ") }), rmqpb.Code_ILLEGAL_MESSAGE_TAG},
		{"tag with bar", one(func(m *rmqpb.Message) { m.SystemProperties.Tag = proto.String("a|b") }), rmqpb.Code_ILLEGAL_MESSAGE_TAG},
		{"tag with control", one(func(m *rmqpb.Message) { m.SystemProperties.Tag = proto.String("a\nb") }), rmqpb.Code_ILLEGAL_MESSAGE_TAG},
		{"blank key", one(func(m *rmqpb.Message) { m.SystemProperties.Keys = []string{"ok", " "} }), rmqpb.Code_ILLEGAL_MESSAGE_KEY},
		{"key with control", one(func(m *rmqpb.Message) { m.SystemProperties.Keys = []string{"a\tb"} }), rmqpb.Code_ILLEGAL_MESSAGE_KEY},
		{"group too long", one(func(m *rmqpb.Message) {
			m.Topic = res("fifo")
			m.SystemProperties.MessageGroup = proto.String(strings.Repeat("g", 64))
		}), rmqpb.Code_ILLEGAL_MESSAGE_GROUP},
		{"too many properties", one(func(m *rmqpb.Message) { m.UserProperties = manyProps }), rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE},
		{"properties too large", one(func(m *rmqpb.Message) {
			m.UserProperties = map[string]string{"big": strings.Repeat("v", 16<<10)}
		}), rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE},
		{"empty body", one(func(m *rmqpb.Message) { m.Body = nil }), rmqpb.Code_MESSAGE_BODY_EMPTY},
		{"body too large", one(func(m *rmqpb.Message) { m.Body = make([]byte, 4<<20+1) }), rmqpb.Code_MESSAGE_BODY_TOO_LARGE},
		{"delivery too far", one(func(m *rmqpb.Message) {
			m.Topic = res("delay")
			m.SystemProperties.DeliveryTimestamp = timestamppb.New(time.Now().Add(25 * time.Hour))
		}), rmqpb.Code_ILLEGAL_DELIVERY_TIME},
		{"recovery too long", one(func(m *rmqpb.Message) {
			m.Topic = res("tx")
			m.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
			m.SystemProperties.OrphanedTransactionRecoveryDuration = durationpb.New(2 * time.Hour)
		}), rmqpb.Code_BAD_REQUEST},
	}
}

func TestDecodeSendCodes(t *testing.T) {
	for _, tc := range sendCases() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeSend(tc.req(), defaultLimits(), time.Now(), "peer")
			require.Error(t, err)
			assert.Equal(t, tc.want, toStatus(err).GetCode(), err.Error())
		})
	}
}

func TestDecodeSendConverts(t *testing.T) {
	m := msg("normal", "id-1", "body")
	m.SystemProperties.Keys = []string{"k1", "k2"}
	m.SystemProperties.Tag = proto.String("t")
	m.SystemProperties.BornTimestamp = timestamppb.New(time.UnixMilli(1234))
	m.SystemProperties.MessageGroup = proto.String("grp")
	m.SystemProperties.QueueId = 3
	m.UserProperties = map[string]string{"lane": "a"}
	plan, err := decodeSend(&rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}}, defaultLimits(), time.Now(), "10.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, TypeFIFO, plan.kind)
	assert.Equal(t, int32(3), plan.queueID)
	assert.Equal(t, "grp", plan.group)
	sm := plan.messages[0]
	assert.Equal(t, "10.0.0.1", sm.BornHost)
	assert.Equal(t, int64(1234), sm.BornTimestamp)
	assert.Equal(t, "t", sm.Tag)
	assert.Equal(t, map[string]string{
		"lane": "a", propKeys: "k1 k2", propUniqKey: "id-1", propProducerGroup: "normal", propShardingKey: "grp",
	}, sm.Properties)
}

// The whole wire path answers the same codes, plus the checks that need the
// broker: unknown topic and the topic's message type.
func TestSendCodesOverTheWire(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-send-codes")
	for _, tc := range sendCases() {
		t.Run(tc.name, func(t *testing.T) {
			resp := c.send(tc.req().GetMessages()...)
			assert.Equal(t, tc.want, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
			assert.Empty(t, resp.GetEntries())
		})
	}
	typed := func(topic string, mod func(*rmqpb.SystemProperties)) *rmqpb.Message {
		m := msg(topic, "typed", "x")
		mod(m.SystemProperties)
		return m
	}
	group := func(sp *rmqpb.SystemProperties) { sp.MessageGroup = proto.String("g") }
	delay := func(sp *rmqpb.SystemProperties) { sp.DeliveryTimestamp = timestamppb.New(time.Now().Add(time.Minute)) }
	tx := func(sp *rmqpb.SystemProperties) { sp.MessageType = rmqpb.MessageType_TRANSACTION }
	none := func(*rmqpb.SystemProperties) {}
	for _, tc := range []struct {
		name string
		m    *rmqpb.Message
		want rmqpb.Code
	}{
		{"unknown topic", typed("nope", none), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"fifo to normal", typed("normal", group), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"normal to fifo", typed("fifo", none), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"delay to normal", typed("normal", delay), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"transaction to normal", typed("normal", tx), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"fifo to mixed", typed("mixed", group), rmqpb.Code_OK},
		{"delay to delay", typed("delay", delay), rmqpb.Code_OK},
		{"transaction to transaction", typed("tx", tx), rmqpb.Code_OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := c.send(tc.m)
			assert.Equal(t, tc.want, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
		})
	}
}

func TestGarbageReceiptHandles(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	c := dial(t, b.Addr(), "client-garbage")
	c.sendN("normal", 1)
	r := c.receive("g1", "normal", 1, 10*time.Second, 2*time.Second)
	require.Len(t, r.messages, 1)
	real := r.messages[0].GetSystemProperties().GetReceiptHandle()
	other := receipt{broker: "elsewhere", topic: "normal", offset: 0, nonce: 1}.encode()
	wrongTopic := receipt{broker: "b0", topic: "mixed", offset: 0, nonce: 1}.encode()
	// Handles that do not decode: the proxy's internal error.
	for _, h := range []string{"", "garbage", "!!!!", strings.Repeat("A", 5000), real[:len(real)-2]} {
		assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, c.ackHandle("g1", "normal", h).GetStatus().GetCode(), "ack %q", h)
		assert.Equal(t, rmqpb.Code_INTERNAL_SERVER_ERROR, c.change("g1", "normal", h, time.Second).GetStatus().GetCode(), "change %q", h)
	}
	// Handles that decode but name no delivery here.
	for _, h := range []string{other, wrongTopic, receipt{broker: "b0", topic: "normal", queueID: 77, offset: 5, nonce: 9}.encode()} {
		assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.ackHandle("g1", "normal", h).GetStatus().GetCode(), "ack %q", h)
		assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.change("g1", "normal", h, time.Second).GetStatus().GetCode(), "change %q", h)
	}
	// A real handle presented for another group is not that group's.
	assert.Equal(t, rmqpb.Code_INVALID_RECEIPT_HANDLE, c.ackHandle("g3", "normal", real).GetStatus().GetCode())
	assert.Equal(t, rmqpb.Code_OK, c.ackHandle("g1", "normal", real).GetStatus().GetCode())
}

func TestFilterParse(t *testing.T) {
	f, err := parseTagExpression("a || b ||c")
	require.NoError(t, err)
	assert.True(t, f.match("a"))
	assert.True(t, f.match("c"))
	assert.False(t, f.match("d"))
	assert.False(t, f.match(""))
	for _, all := range []string{"", "*", " * ", "a || *"} {
		f, err := parseTagExpression(all)
		require.NoError(t, err)
		assert.True(t, f.match("anything"), all)
	}
	_, err = parseTagExpression("||")
	assert.Error(t, err)
}

func TestReceiptRoundTrip(t *testing.T) {
	r := receipt{broker: "b0", topic: "t", queueID: 3, offset: 1 << 40, nonce: 0xdeadbeef, popTime: 1700000000000, deadline: 1700000060000}
	got, err := decodeReceipt(r.encode())
	require.NoError(t, err)
	assert.Equal(t, r, got)
}

func FuzzDecodeReceipt(f *testing.F) {
	f.Add(receipt{broker: "b0", topic: "t", queueID: 1, offset: 2, nonce: 3, popTime: 4, deadline: 5}.encode())
	f.Add("")
	f.Add("AQ")
	f.Add("garbage handle")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := decodeReceipt(s)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to a handle that decodes the same.
		again, err := decodeReceipt(r.encode())
		require.NoError(t, err)
		require.Equal(t, r, again)
	})
}

// FuzzValidateSend feeds arbitrary bytes, decoded as a SendMessageRequest,
// to the send validator: it must answer with a status or a plan, never
// panic, and a plan must satisfy the limits it checked.
func FuzzValidateSend(f *testing.F) {
	lim := defaultLimits()
	for _, tc := range sendCases() {
		if req := tc.req(); proto.Size(req) < 64<<10 {
			b, _ := proto.Marshal(req)
			f.Add(b)
		}
	}
	ok, _ := proto.Marshal(&rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("normal", "id", "body")}})
	f.Add(ok)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rmqpb.SendMessageRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		plan, err := decodeSend(&req, lim, time.Unix(1700000000, 0), "peer")
		if err != nil {
			st := toStatus(err)
			require.NotEqual(t, rmqpb.Code_OK, st.GetCode())
			require.NotEqual(t, rmqpb.Code_INTERNAL_SERVER_ERROR, st.GetCode(), "validation errors carry a precise code: %v", err)
			return
		}
		require.Len(t, plan.messages, len(req.GetMessages()))
		for _, m := range plan.messages {
			require.NotEmpty(t, m.Body)
			require.LessOrEqual(t, len(m.Body), lim.MaxBodySize)
			require.NotEmpty(t, strings.TrimSpace(m.Properties[propUniqKey]))
			require.NoError(t, checkTopicName(m.Topic))
		}
	})
}

// FuzzReceiveRequest checks that any decodable ReceiveMessageRequest gets a
// status (or messages) from the validator, never a panic.
func FuzzReceiveRequest(f *testing.F) {
	seed, _ := proto.Marshal(&rmqpb.ReceiveMessageRequest{Group: res("g1"), MessageQueue: &rmqpb.MessageQueue{Topic: res("normal")},
		BatchSize: 1, InvisibleDuration: durationpb.New(time.Second), LongPollingTimeout: durationpb.New(time.Second)})
	f.Add(seed)
	f.Add([]byte{})
	cfg := Config{Name: "fuzz", DataDir: f.TempDir(), Topics: []Topic{{Name: "normal"}}}
	require.NoError(f, cfg.normalize())
	b := &Broker{cfg: cfg, topics: map[string]Topic{"normal": cfg.Topics[0]}, groups: map[string]Group{}, clients: map[string]*client{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rmqpb.ReceiveMessageRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		ctx, cancel := contextWithDeadline(time.Second)
		defer cancel()
		rr, err := b.checkReceive(ctx, &req, "fuzz-client", time.Now())
		if err != nil {
			require.NotEqual(t, rmqpb.Code_OK, toStatus(err).GetCode())
			return
		}
		require.Positive(t, rr.opts.max)
		require.LessOrEqual(t, rr.opts.max, cfg.Limits.MaxBatchSize)
	})
}
