package driver

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func newNSClient(t testing.TB, namespace string) *Client {
	t.Helper()
	c, err := New(Config{Type: Producer, Topics: []string{"orders"}, Namespace: namespace})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// encodeSend encodes r as the codec does and checks WireSize against it.
func encodeSend(t testing.TB, r *sendRequest) []byte {
	t.Helper()
	size := r.WireSize()
	b := r.AppendWire(make([]byte, 0, size))
	require.Len(t, b, size, "WireSize must be exact")
	return b
}

// requireSameRequest checks that the bytes of the hand-coded request parse
// to the message the generated path builds from the same inputs, and that
// the codec sends exactly those bytes.
func requireSameRequest(t *testing.T, c *Client, r *sendRequest, label string) {
	t.Helper()
	b := encodeSend(t, r)
	want := generatedSend(c, r)
	got := &rmqpb.SendMessageRequest{}
	require.NoError(t, proto.Unmarshal(b, got), label)
	require.True(t, proto.Equal(want, got), "%s:\nwant %v\ngot  %v", label, want, got)

	// Without maps in play the generated marshaller's output is fixed,
	// and the hand-coded bytes are the same bytes.
	multiProp := false
	for _, m := range r.msgs {
		multiProp = multiProp || len(m.Properties) > 1
	}
	if !multiProp {
		wantBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		require.NoError(t, err)
		require.True(t, bytes.Equal(wantBytes, b), "%s: bytes differ from proto.Marshal", label)
	}

	// The codec sends the request's own encoding (map order may differ
	// from one encoding to the next).
	data, err := pbcodec.New().Marshal(r)
	require.NoError(t, err)
	sent := data.Materialize()
	data.Free()
	if multiProp {
		viaCodec := &rmqpb.SendMessageRequest{}
		require.NoError(t, proto.Unmarshal(sent, viaCodec), label)
		require.True(t, proto.Equal(want, viaCodec), label)
	} else {
		require.True(t, bytes.Equal(b, sent), "%s: the codec sends the request's own bytes", label)
	}
}

// Every field the driver sets, set and unset, alone and together.
func TestSendRequestRoundTripFields(t *testing.T) {
	for _, ns := range []string{"", "ns-1"} {
		c := newNSClient(t, ns)
		body := []byte("payload")
		cases := map[string]*Message{
			"minimal":               {Topic: "orders", Body: body},
			"tag":                   {Topic: "orders", Body: body, Tag: "paid"},
			"keys":                  {Topic: "orders", Body: body, Keys: []string{"k1", "", "k3"}},
			"id":                    {Topic: "orders", Body: body, ID: "0A0B0C0D0E0F000000000000000000000A"},
			"group":                 {Topic: "orders", Body: body, Group: "g-1"},
			"delivery":              {Topic: "orders", Body: body, DeliveryTime: time.Unix(1_700_000_000, 123_456_789)},
			"delivery whole second": {Topic: "orders", Body: body, DeliveryTime: time.Unix(1_700_000_000, 0)},
			"delivery epoch":        {Topic: "orders", Body: body, DeliveryTime: time.Unix(0, 0)},
			"delivery before epoch": {Topic: "orders", Body: body, DeliveryTime: time.Unix(-86_400, 5)},
			"transactional":         {Topic: "orders", Body: body, Transactional: true},
			"transactional orphan":  {Topic: "orders", Body: body, Transactional: true, OrphanRecovery: 5 * time.Second},
			"orphan with nanos":     {Topic: "orders", Body: body, Transactional: true, OrphanRecovery: 1500 * time.Millisecond},
			"orphan below second":   {Topic: "orders", Body: body, Transactional: true, OrphanRecovery: 7},
			"orphan not tx":         {Topic: "orders", Body: body, OrphanRecovery: time.Second},
			"trace":                 {Topic: "orders", Body: body, TraceContext: "00-abc-def-01"},
			"born host":             {Topic: "orders", Body: body, BornHost: "host-7"},
			"born time":             {Topic: "orders", Body: body, BornTime: time.Unix(1_600_000_000, 1)},
			"born epoch":            {Topic: "orders", Body: body, BornTime: time.Unix(0, 0)},
			"property":              {Topic: "orders", Body: body, Properties: map[string]string{"k": "v"}},
			"empty property":        {Topic: "orders", Body: body, Properties: map[string]string{"": ""}},
			"properties":            {Topic: "orders", Body: body, Properties: map[string]string{"a": "1", "b": "", "ü": "€", "long": strings.Repeat("x", 300)}},
			"empty properties map":  {Topic: "orders", Body: body, Properties: map[string]string{}},
			"queue 0":               {Topic: "orders", Body: body, QueueID: 0},
			"queue 5":               {Topic: "orders", Body: body, QueueID: 5},
			"any queue":             {Topic: "orders", Body: body, QueueID: AnyQueue},
			"queue max":             {Topic: "orders", Body: body, QueueID: math.MaxInt32},
			"queue min":             {Topic: "orders", Body: body, QueueID: math.MinInt32},
			"large body":            {Topic: "orders", Body: bytes.Repeat([]byte{0xff, 0}, 70_000)},
			"unicode":               {Topic: "订单", Body: body, Tag: "标签", Keys: []string{"ключ"}, Group: "grüppe"},
			"everything": {Topic: "orders", Body: body, Tag: "t", Keys: []string{"a", "b"}, ID: "custom-id", Group: "g",
				DeliveryTime: time.Unix(1_800_000_000, 999_999_999), Properties: map[string]string{"p": "q"},
				QueueID: 3, TraceContext: "tc", BornHost: "bh", BornTime: time.Unix(1_700_000_001, 2)},
		}
		for name, m := range cases {
			r, err := c.newSendRequest([]*Message{m}, "h:1", 0)
			require.NoError(t, err, name)
			requireSameRequest(t, c, r, ns+"/"+name)
		}
	}
}

// randomMessage draws a message with every optional field set or not.
func randomMessage(rng *rand.Rand, topic string) *Message {
	str := func(max int) string {
		const alphabet = "abcXYZ019-_.ü€订"
		runes := []rune(alphabet)
		var b strings.Builder
		for range rng.IntN(max + 1) {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		return b.String()
	}
	when := func() time.Time {
		switch rng.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return time.Unix(rng.Int64N(4_000_000_000)-1_000_000_000, 0)
		default:
			return time.Unix(rng.Int64N(4_000_000_000), rng.Int64N(1e9))
		}
	}
	m := &Message{Topic: topic, Body: make([]byte, 1+rng.IntN(2000))}
	for i := range m.Body {
		m.Body[i] = byte(rng.IntN(256))
	}
	if rng.IntN(2) == 0 {
		m.Tag = str(12)
	}
	for range rng.IntN(4) {
		m.Keys = append(m.Keys, str(8))
	}
	if rng.IntN(3) == 0 {
		m.ID = str(34)
	}
	if rng.IntN(3) == 0 {
		m.Group = str(10)
	}
	if rng.IntN(3) == 0 {
		m.DeliveryTime = when()
	}
	if rng.IntN(3) == 0 {
		m.TraceContext = str(40)
	}
	if rng.IntN(2) == 0 {
		m.BornHost = str(16)
	}
	m.BornTime = when()
	switch rng.IntN(4) {
	case 0:
	case 1:
		m.Properties = map[string]string{}
	case 2:
		m.Properties = map[string]string{str(6): str(20)}
	default:
		m.Properties = map[string]string{}
		for range 1 + rng.IntN(6) {
			m.Properties[str(6)] = str(20)
		}
	}
	switch rng.IntN(4) {
	case 0:
		m.QueueID = AnyQueue
	case 1:
		m.QueueID = 0
	default:
		m.QueueID = rng.Int32N(1 << 20)
	}
	return m
}

// Batches of 1..N random messages, and random transactional singles.
func TestSendRequestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ns := range []string{"", "tenant"} {
		c := newNSClient(t, ns)
		for round := range 300 {
			n := 1 + rng.IntN(40)
			msgs := make([]*Message, n)
			for i := range msgs {
				msgs[i] = randomMessage(rng, "topic-"+ns)
			}
			if n == 1 && rng.IntN(2) == 0 {
				msgs[0].Transactional = true
				msgs[0].Group, msgs[0].DeliveryTime = "", time.Time{}
				msgs[0].OrphanRecovery = time.Duration(rng.Int64N(int64(time.Hour)))
			}
			r, err := c.newSendRequest(msgs, "h:1", 0)
			require.NoError(t, err)
			requireSameRequest(t, c, r, "round "+strconv.Itoa(round))
		}
	}
}

// The validation is the one the generated path had, plus UTF-8 (which the
// generated marshaller refused only once the call was under way).
func TestSendRequestValidation(t *testing.T) {
	c := newNSClient(t, "")
	ok := func() *Message { return &Message{Topic: "orders", Body: []byte("x")} }
	bad := "bad\xffutf8"
	cases := []struct {
		name  string
		msgs  []*Message
		max   int
		class error
	}{
		{"none", nil, 0, ErrBadRequest},
		{"nil message", []*Message{ok(), nil}, 0, ErrBadRequest},
		{"no topic", []*Message{{Topic: " ", Body: []byte("x")}}, 0, ErrBadRequest},
		{"two topics", []*Message{ok(), {Topic: "other", Body: []byte("x")}}, 0, ErrBadRequest},
		{"empty body", []*Message{ok(), {Topic: "orders"}}, 0, ErrBadRequest},
		{"too large", []*Message{{Topic: "orders", Body: make([]byte, 11)}}, 10, ErrTooLarge},
		{"tx group", []*Message{{Topic: "orders", Body: []byte("x"), Transactional: true, Group: "g"}}, 0, ErrBadRequest},
		{"tx delay", []*Message{{Topic: "orders", Body: []byte("x"), Transactional: true, DeliveryTime: time.Now()}}, 0, ErrBadRequest},
		{"tx batch", []*Message{{Topic: "orders", Body: []byte("x"), Transactional: true}, ok()}, 0, ErrBadRequest},
		{"utf8 topic", []*Message{{Topic: bad, Body: []byte("x")}}, 0, ErrBadRequest},
		{"utf8 tag", []*Message{{Topic: "orders", Body: []byte("x"), Tag: bad}}, 0, ErrBadRequest},
		{"utf8 key", []*Message{ok(), {Topic: "orders", Body: []byte("x"), Keys: []string{"k", bad}}}, 0, ErrBadRequest},
		{"utf8 id", []*Message{{Topic: "orders", Body: []byte("x"), ID: bad}}, 0, ErrBadRequest},
		{"utf8 group", []*Message{{Topic: "orders", Body: []byte("x"), Group: bad}}, 0, ErrBadRequest},
		{"utf8 trace", []*Message{{Topic: "orders", Body: []byte("x"), TraceContext: bad}}, 0, ErrBadRequest},
		{"utf8 born host", []*Message{{Topic: "orders", Body: []byte("x"), BornHost: bad}}, 0, ErrBadRequest},
		{"utf8 property name", []*Message{{Topic: "orders", Body: []byte("x"), Properties: map[string]string{bad: "v"}}}, 0, ErrBadRequest},
		{"utf8 property value", []*Message{{Topic: "orders", Body: []byte("x"), Properties: map[string]string{"k": bad}}}, 0, ErrBadRequest},
	}
	for _, tc := range cases {
		r, err := c.newSendRequest(tc.msgs, "h:1", tc.max)
		require.Error(t, err, tc.name)
		assert.Nil(t, r, tc.name)
		assert.ErrorIs(t, err, tc.class, tc.name)
		var de *Error
		require.True(t, errors.As(err, &de), tc.name)
		assert.Equal(t, "SendMessage", de.RPC, tc.name)
		assert.False(t, Retryable(err), tc.name)
	}
	// A body at the limit passes; the caller's messages are left as given.
	m := &Message{Topic: "orders", Body: make([]byte, 10)}
	r, err := c.newSendRequest([]*Message{m}, "h:1", 10)
	require.NoError(t, err)
	assert.Empty(t, m.ID, "the generated id is the request's, not written into the message")
	assert.NotEmpty(t, r.ids[0])

	_, err = New(Config{Type: Producer, Namespace: bad})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

// Through a real connection: the scripted server decodes the hand-coded
// request with the generated types and answers with them.
func TestSendWireThroughServer(t *testing.T) {
	f := startFake(t, nil)
	c := newNSClient(t, "")
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(3, 4))
	msgs := make([]*Message, 17)
	for i := range msgs {
		msgs[i] = randomMessage(rng, "orders")
	}
	res, err := c.Send(ctx, f.addr, msgs)
	require.NoError(t, err)
	require.Len(t, res, len(msgs))
	f.mu.Lock()
	got := f.sends[len(f.sends)-1]
	f.mu.Unlock()
	require.Len(t, got.GetMessages(), len(msgs))
	for i, m := range got.GetMessages() {
		sp := m.GetSystemProperties()
		assert.Equal(t, res[i].MessageID, sp.GetMessageId())
		assert.Equal(t, int64(100+i), res[i].Offset)
		assert.Equal(t, msgs[i].Body, m.GetBody())
		assert.Equal(t, msgs[i].Tag, sp.GetTag())
		assert.Equal(t, msgs[i].QueueID, sp.GetQueueId())
		assert.Equal(t, len(msgs[i].Properties), len(m.GetUserProperties()))
	}
	_, err = c.Send(ctx, f.addr, []*Message{{Topic: "orders", Body: []byte("x"), Properties: map[string]string{"k": "\xff"}}})
	assert.ErrorIs(t, err, ErrBadRequest)
}

func benchBatch(n, size int) []*Message {
	body := make([]byte, size)
	msgs := make([]*Message, n)
	for i := range msgs {
		msgs[i] = &Message{Topic: "orders", Body: body, QueueID: 0}
	}
	return msgs
}

// BenchmarkEncodeSend measures building and encoding one request of 32
// messages of 1 KB through the codec, the generated way and the hand-coded
// way (both include validation and id generation).
func BenchmarkEncodeSend(b *testing.B) {
	c := newNSClient(b, "")
	codec := pbcodec.New()
	msgs := benchBatch(32, 1024)
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, err := c.validateSend(msgs, "h:1", 0)
			if err != nil {
				b.Fatal(err)
			}
			data, err := codec.Marshal(generatedSend(c, r))
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, err := c.newSendRequest(msgs, "h:1", 0)
			if err != nil {
				b.Fatal(err)
			}
			data, err := codec.Marshal(r)
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
}

// newSendRequest is prepareSend into a new request.
func (c *Client) newSendRequest(msgs []*Message, endpoint string, maxBody int) (*sendRequest, error) {
	r := new(sendRequest)
	if err := c.prepareSend(r, msgs, endpoint, maxBody); err != nil {
		return nil, err
	}
	return r, nil
}

// validateSend is fillSend into a new request, left unmeasured.
func (c *Client) validateSend(msgs []*Message, endpoint string, maxBody int) (*sendRequest, error) {
	r := new(sendRequest)
	if err := c.fillSend(r, msgs, endpoint, maxBody); err != nil {
		return nil, err
	}
	return r, nil
}
