package broker

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

var _ pbcodec.BufferUnmarshaler = (*sendRequest)(nil)

// sameDecoding asserts that the wire decoder and the generated path
// (proto.Unmarshal, then the conversion of the generated messages) agree on
// data: both refuse the bytes, or both produce the same plan (the same
// store messages), or both refuse the request with the same code.
func sameDecoding(t testing.TB, data []byte, lim *Limits) {
	t.Helper()
	sameDecodingIn(t, data, lim, new(sendScratch))
}

// sameDecodingIn is sameDecoding with the wire path in sc, as the service
// recycles it: sc is reset afterwards, ready for the next request.
func sameDecodingIn(t testing.TB, data []byte, lim *Limits, sc *sendScratch) {
	t.Helper()
	defer sc.reset()
	var req rmqpb.SendMessageRequest
	gerr := proto.Unmarshal(data, &req)
	msgs, werr := decodeSendWire(data, sc)
	if gerr != nil || werr != nil {
		require.Equal(t, gerr == nil, werr == nil, "proto.Unmarshal: %v; wire decoder: %v; data %x", gerr, werr, data)
		require.ErrorIs(t, werr, ErrMalformedSend)
		return
	}
	want, wantErr := decodeSend(&req, lim, genNow(), "peer")
	got, err := planSend(msgs, sc, lim, genNow(), "peer")
	if wantErr != nil || err != nil {
		require.Error(t, wantErr, "the generated path accepts what the wire path refuses: %v", err)
		require.Error(t, err, "the wire path accepts what the generated path refuses: %v", wantErr)
		require.Equal(t, toStatus(wantErr).GetCode(), toStatus(err).GetCode(), "generated: %v; wire: %v", wantErr, err)
		return
	}
	require.Equal(t, want, got)
}

// The differential test: many random requests, every field kind set and
// unset, valid and invalid, encoded by proto.Marshal and then rewritten
// the way only a foreign peer would (fields out of order, singular
// messages split into occurrences that merge, scalars sent twice, unknown
// fields). Both paths must agree on every one, and enough of them must be
// accepted, or refused by validation, for the comparison to mean something.
func TestSendWireMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lim := genLimits()
	var malformedN, refused, planned int
	// One scratch for all, as the service recycles it: a request must not
	// see anything of the ones before (property maps included).
	sc := new(sendScratch)
	for i := range 4000 {
		data := genEncoding(r, 1+i%8)
		sameDecodingIn(t, data, lim, sc)
		var req rmqpb.SendMessageRequest
		switch {
		case proto.Unmarshal(data, &req) != nil:
			malformedN++
		default:
			if _, err := decodeSend(&req, lim, genNow(), "peer"); err != nil {
				refused++
			} else {
				planned++
			}
		}
	}
	t.Logf("malformed %d, refused by validation %d, planned %d", malformedN, refused, planned)
	require.Greater(t, planned, 400)
	require.Greater(t, refused, 400)
	require.Greater(t, malformedN, 40)
}

// Hand-written encodings at the edges of the protobuf rules.
func TestSendWireEdgeCases(t *testing.T) {
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	bytesField := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), v)
	}
	varintField := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	topic := bytesField(nil, fieldResourceName, []byte("normal"))
	system := func(extra []byte) []byte {
		sp := bytesField(nil, spMessageID, []byte("id-1"))
		return append(sp, extra...)
	}
	message := func(sp []byte, more ...[]byte) []byte {
		m := bytesField(nil, fieldMessageTopic, topic)
		m = bytesField(m, fieldMessageSystem, sp)
		m = bytesField(m, fieldMessageBody, []byte("body"))
		for _, x := range more {
			m = append(m, x...)
		}
		return m
	}
	request := func(ms ...[]byte) []byte {
		var b []byte
		for _, m := range ms {
			b = bytesField(b, fieldRequestMessages, m)
		}
		return b
	}
	entry := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	userProp := func(e []byte) []byte { return bytesField(nil, fieldMessageUser, e) }
	valid := request(message(system(nil)))

	cases := map[string][]byte{
		"empty":                        nil,
		"valid":                        valid,
		"truncated":                    valid[:len(valid)-1],
		"length beyond the end":        append(tag(nil, fieldRequestMessages, protowire.BytesType), 0x7f, 1),
		"field number 0":               append(varintField(nil, 1, 1)[:0], 0x00, 0x01),
		"field number 2^29":            append(protowire.AppendVarint(nil, uint64(1)<<32), 1),
		"field number 2^29-1":          varintField(valid, protowire.MaxValidNumber, 1),
		"end group alone":              append(valid, tag(nil, 5, protowire.EndGroupType)...),
		"reserved wire type 6":         append(valid, 0x0e, 0x00),
		"overlong varint":              append(tag(nil, 9, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
		"unterminated group":           append(valid, tag(nil, 9, protowire.StartGroupType)...),
		"invalid UTF-8 message id":     request(message(bytesField(nil, spMessageID, []byte("id\xff")))),
		"invalid UTF-8 store host":     request(message(system(bytesField(nil, spStoreHost, []byte{0xc0, 0x80})))),
		"invalid UTF-8 receipt handle": request(message(system(bytesField(nil, spReceiptHandle, []byte{0xff})))),
		"invalid UTF-8 digest":         request(message(system(bytesField(nil, spBodyDigest, bytesField(nil, fieldDigestChecksum, []byte{0xff}))))),
		"invalid UTF-8 dead letter":    request(message(system(bytesField(nil, spDeadLetterQueue, bytesField(nil, fieldDeadLetterID, []byte{0xff}))))),
		"invalid UTF-8 user key":       request(message(system(nil), userProp(bytesField(nil, fieldMapKey, []byte{0xff})))),
		"invalid UTF-8 user value":     request(message(system(nil), userProp(bytesField(nil, fieldMapValue, []byte{0xff})))),
		"invalid UTF-8 topic":          request(bytesField(message(system(nil)), fieldMessageTopic, bytesField(nil, fieldResourceName, []byte{0xff}))),
		"invalid UTF-8 unknown field":  append(valid, bytesField(nil, 77, []byte{0xff})...),
		"invalid UTF-8 in a body":      request(bytesField(message(system(nil)), fieldMessageBody, []byte{0xff})),
		"map entry without value":      request(message(system(nil), userProp(bytesField(nil, fieldMapKey, []byte("k"))))),
		"map entry without key":        request(message(system(nil), userProp(bytesField(nil, fieldMapValue, []byte("v"))))),
		"map entry empty":              request(message(system(nil), userProp(nil))),
		"map entry key twice": request(message(system(nil), userProp(entry(bytesField(nil, fieldMapKey, []byte("a")),
			bytesField(nil, fieldMapKey, []byte("b")), bytesField(nil, fieldMapValue, []byte("v")))))),
		"map key twice, last wins": request(message(system(nil),
			userProp(entry(bytesField(nil, fieldMapKey, []byte("k")), bytesField(nil, fieldMapValue, []byte("\x01")))),
			userProp(entry(bytesField(nil, fieldMapKey, []byte("k")), bytesField(nil, fieldMapValue, []byte("ok")))))),
		"map entry with unknown field": request(message(system(nil), userProp(entry(varintField(nil, 3, 1), bytesField(nil, fieldMapKey, []byte("k")))))),
		"map entry field number 2^29":  request(message(system(nil), userProp(append([]byte{0x80, 0x80, 0x80, 0x80, 0x10}, 0)))),
		"map value as varint":          request(message(system(nil), userProp(entry(bytesField(nil, fieldMapKey, []byte("k")), varintField(nil, fieldMapValue, 3))))),
		"enum above int32":             request(message(system(varintField(nil, spMessageType, 1<<32|4)))),
		"negative enum":                request(message(system(varintField(nil, spBodyEncoding, ^uint64(0))))),
		"queue id above int32":         request(message(system(varintField(nil, spQueueID, 1<<32|2)))),
		"message id as varint":         request(message(varintField(bytesField(nil, spMessageID, []byte("id")), spMessageID, 9))),
		"body twice, empty last":       request(bytesField(message(system(nil)), fieldMessageBody, nil)),
		"topic split over two occurrences": request(append(bytesField(nil, fieldMessageTopic, bytesField(nil, fieldResourceNS, []byte("ns"))),
			message(system(nil))...)),
		"system properties twice": request(bytesField(message(system(nil)), fieldMessageSystem,
			bytesField(varintField(nil, spMessageType, uint64(rmqpb.MessageType_TRANSACTION)), spKeys, []byte("k2")))),
		"empty born timestamp":  request(message(system(bytesField(nil, spBornTimestamp, nil)))),
		"delivery time merged":  request(message(system(bytesField(bytesField(nil, spDeliveryTimestamp, varintField(nil, fieldNanos, 5)), spDeliveryTimestamp, varintField(nil, fieldSeconds, uint64(genNow().Unix()+60)))))),
		"nanos above int32":     request(message(system(bytesField(nil, spBornTimestamp, varintField(nil, fieldNanos, 1<<32|7))))),
		"empty tag":             request(message(system(bytesField(nil, spTag, nil)))),
		"group with known num":  request(append(message(system(nil)), tag(tag(nil, fieldMessageBody, protowire.StartGroupType), fieldMessageBody, protowire.EndGroupType)...)),
		"mismatched end group":  request(append(message(system(nil)), tag(tag(nil, 8, protowire.StartGroupType), 9, protowire.EndGroupType)...)),
		"no system properties":  request(bytesField(bytesField(nil, fieldMessageTopic, topic), fieldMessageBody, []byte("b"))),
		"second topic differs":  request(message(system(nil)), bytesField(message(system(nil)), fieldMessageTopic, bytesField(nil, fieldResourceName, []byte("fifo")))),
		"request of 2 messages": request(message(system(nil)), message(system(nil))),
	}
	lim := genLimits()
	for name, data := range cases {
		t.Run(name, func(t *testing.T) { sameDecoding(t, data, lim) })
	}
}

// countingPool is a buffer pool that counts what comes back to it.
type countingPool struct{ puts atomic.Int32 }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.puts.Add(1) }

// pooledBuffer wraps data in a buffer of p (at least gRPC's pooling
// threshold, so that Free really gives it back) and returns the backing
// array too.
func pooledBuffer(data []byte, p *countingPool) (mem.Buffer, []byte) {
	backing := make([]byte, len(data), max(len(data), 4096))
	copy(backing, data)
	return mem.NewBuffer(&backing, p), backing
}

// The request owns the buffer: it frees it exactly once, at release after a
// successful decode and at once after a failed one; the bodies are views of
// it, not copies.
func TestSendRequestOwnsBuffer(t *testing.T) {
	req := &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("normal", "a", "first body"), msg("normal", "b", "second body")}}
	data, err := proto.Marshal(req)
	require.NoError(t, err)

	var p countingPool
	buf, backing := pooledBuffer(data, &p)
	var r sendRequest
	require.NoError(t, r.UnmarshalBuffer(buf))
	require.Len(t, r.msgs, 2)
	require.Equal(t, "second body", string(r.msgs[1].body))
	require.True(t, within(r.msgs[1].body, backing), "the body is a view of the received bytes")
	topic, ok := r.PublishTopic()
	require.True(t, ok)
	require.Equal(t, "normal", topic)
	require.Zero(t, p.puts.Load())
	r.release()
	r.release()
	require.Equal(t, int32(1), p.puts.Load())
	require.Nil(t, r.msgs)

	var p2 countingPool
	buf, _ = pooledBuffer(data[:len(data)-3], &p2)
	err = (&sendRequest{}).UnmarshalBuffer(buf)
	require.ErrorIs(t, err, ErrMalformedSend)
	require.Equal(t, int32(1), p2.puts.Load(), "a request that does not decode frees its buffer at once")

	empty := &sendRequest{}
	require.NoError(t, empty.UnmarshalBuffer(mem.SliceBuffer(nil)))
	_, ok = empty.PublishTopic()
	require.False(t, ok)
}

func within(b, backing []byte) bool {
	if len(b) == 0 {
		return false
	}
	for i := range backing[:cap(backing)] {
		if &backing[:cap(backing)][i] == &b[0] {
			return true
		}
	}
	return false
}

// After a send, nothing refers to the received bytes: the buffer goes back
// to the pool, is overwritten, and every stored message still reads back
// intact, on the direct path (a batch), the timer (a delayed message) and
// the transaction path (a half message, committed).
func TestSendWireBodiesOutliveBuffer(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	s := &service{b: b}
	c := dial(t, b.Addr(), "client-outlive")
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-mq-client-id", "outlive", "x-mq-language", "GO"))

	send := func(msgs ...*rmqpb.Message) *rmqpb.SendMessageResponse {
		t.Helper()
		data, err := proto.Marshal(&rmqpb.SendMessageRequest{Messages: msgs})
		require.NoError(t, err)
		var p countingPool
		buf, backing := pooledBuffer(data, &p)
		var r sendRequest
		require.NoError(t, r.UnmarshalBuffer(buf))
		reply := s.sendDecoded(ctx, &r)
		r.release()
		require.Equal(t, int32(1), p.puts.Load())
		for i := range backing[:cap(backing)] {
			backing[:cap(backing)][i] = '#'
		}
		// gRPC writes the reply after the handler released the request.
		return decodedReply(t, reply)
	}
	body := func(i int) string { return fmt.Sprintf("body %d %s", i, bytes.Repeat([]byte{'x'}, 100+i)) }

	var batch []*rmqpb.Message
	for i := range 5 {
		batch = append(batch, msg("normal", fmt.Sprintf("n-%d", i), body(i)))
	}
	resp := send(batch...)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	require.Len(t, resp.GetEntries(), 5)
	require.Equal(t, "n-3", resp.GetEntries()[3].GetMessageId())
	got := c.drain("g1", "normal", 5, 10*time.Second)
	require.Len(t, got, 5)
	for i, m := range got {
		require.Equal(t, body(i), string(m.GetBody()))
		require.Equal(t, fmt.Sprintf("n-%d", i), m.GetSystemProperties().GetMessageId())
	}

	delayed := msg("delay", "d-1", body(7))
	delayed.SystemProperties.DeliveryTimestamp = timestamppb.New(time.Now().Add(300 * time.Millisecond))
	require.Equal(t, rmqpb.Code_OK, send(delayed).GetStatus().GetCode())
	got = c.drain("g1", "delay", 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, body(7), string(got[0].GetBody()))

	half := msg("tx", "t-1", body(9))
	half.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
	resp = send(half)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
	cctx, cancel := c.ctx(5 * time.Second)
	defer cancel()
	end, err := c.rpc.EndTransaction(cctx, &rmqpb.EndTransactionRequest{Topic: res("tx"), MessageId: "t-1",
		TransactionId: resp.GetEntries()[0].GetTransactionId(), Resolution: rmqpb.TransactionResolution_COMMIT})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, end.GetStatus().GetCode(), end.GetStatus().GetMessage())
	got = c.drain("g1", "tx", 1, 10*time.Second)
	require.Len(t, got, 1)
	require.Equal(t, body(9), string(got[0].GetBody()))
}

// FuzzSendRequestDecode: on any bytes, the wire decoder and the generated
// path agree (see sameDecoding), and the decoder never panics nor reads out
// of bounds.
func FuzzSendRequestDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 40 {
		f.Add(genEncoding(r, 1+i%4))
	}
	for _, tc := range sendCases() {
		if req := tc.req(); proto.Size(req) < 16<<10 {
			b, _ := proto.Marshal(req)
			f.Add(b)
		}
	}
	f.Add([]byte{})
	lim := genLimits()
	f.Fuzz(func(t *testing.T, data []byte) {
		sameDecoding(t, data, lim)
	})
}

// benchRequest is a batch as the producer sends it: 32 messages of 1 KiB
// with an id, a born time and host, and one user property.
func benchRequest() []byte {
	req := &rmqpb.SendMessageRequest{}
	born := timestamppb.New(genNow())
	for i := range 32 {
		m := msg("normal", fmt.Sprintf("0A0B0C0D0E0F%020d", i), "")
		m.Body = bytes.Repeat([]byte{'x'}, 1024)
		m.SystemProperties.BornTimestamp = born
		m.SystemProperties.BornHost = "producer-host-1"
		m.SystemProperties.QueueId = 2
		m.UserProperties = map[string]string{"lane": "blue"}
		req.Messages = append(req.Messages, m)
	}
	data, err := proto.Marshal(req)
	if err != nil {
		panic(err)
	}
	return data
}

// BenchmarkDecodeSend measures what the broker does with a received
// SendMessage before the store appends it: decode and validate into store
// messages. generated is proto.Unmarshal into the generated types and the
// conversion; wire is the broker's own decoder over the received buffer.
func BenchmarkDecodeSend(b *testing.B) {
	data := benchRequest()
	lim := defaultLimits()
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var req rmqpb.SendMessageRequest
			if err := proto.Unmarshal(data, &req); err != nil {
				b.Fatal(err)
			}
			if _, err := decodeSend(&req, lim, genNow(), "peer"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var pool sync.Pool
		for b.Loop() {
			r := sendRequest{pool: &pool}
			if err := r.UnmarshalBuffer(mem.SliceBuffer(data)); err != nil {
				b.Fatal(err)
			}
			if _, err := r.plan(lim, genNow(), "peer"); err != nil {
				b.Fatal(err)
			}
			r.release()
		}
	})
}

// The registered SendMessage handler decodes into a sendRequest, runs the
// interceptor chain with it and releases the buffer after the chain
// returns, also when an interceptor answers without calling the handler.
// The generated service description is left as it was.
func TestSendMessageHandler(t *testing.T) {
	b := startBroker(t, testConfig(t, t.TempDir()))
	s := &service{b: b}
	desc := messagingServiceDesc()
	var handler, generated grpc.MethodHandler
	for _, m := range desc.Methods {
		if m.MethodName == "SendMessage" {
			handler = m.Handler
		}
	}
	for _, m := range rmqpb.MessagingService_ServiceDesc.Methods {
		if m.MethodName == "SendMessage" {
			generated = m.Handler
		}
	}
	require.NotNil(t, handler)
	require.NotEqual(t, reflect.ValueOf(generated).Pointer(), reflect.ValueOf(handler).Pointer())
	require.Len(t, desc.Methods, len(rmqpb.MessagingService_ServiceDesc.Methods))

	data, err := proto.Marshal(&rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("normal", "h-1", "handled")}})
	require.NoError(t, err)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-mq-client-id", "handler", "x-mq-language", "GO"))
	call := func(interceptor grpc.UnaryServerInterceptor) (any, *countingPool) {
		var p countingPool
		dec := func(v any) error {
			// As gRPC does: the codec takes its own reference, and the
			// received slice is freed once it returns.
			buf, _ := pooledBuffer(data, &p)
			in := mem.BufferSlice{buf}
			defer in.Free()
			return pbcodec.New().Unmarshal(in, v)
		}
		resp, err := handler(s, ctx, dec, interceptor)
		require.NoError(t, err)
		return resp, &p
	}

	resp, p := call(nil)
	require.Equal(t, rmqpb.Code_OK, resp.(*sendReply).GetStatus().GetCode())
	require.Equal(t, "OK", statusCodeOf(resp), "the metrics interceptor reads the reply's status")
	require.Equal(t, int32(1), p.puts.Load())

	var seen string
	resp, p = call(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		topic, _ := req.(interface{ PublishTopic() (string, bool) }).PublishTopic()
		seen = info.FullMethod + " " + topic
		return h(ctx, req)
	})
	require.Equal(t, rmqpb.MessagingService_SendMessage_FullMethodName+" normal", seen)
	require.Equal(t, "h-1", decodedReply(t, resp.(*sendReply)).GetEntries()[0].GetMessageId())
	require.Equal(t, int32(1), p.puts.Load())

	refused := &rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_FORBIDDEN}}
	resp, p = call(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { return refused, nil })
	require.Same(t, refused, resp)
	require.Equal(t, int32(1), p.puts.Load(), "a request an interceptor answers is released too")
}

// The reply writes exactly the bytes proto.Marshal writes for the response
// it carries, and says its size right.
func TestSendReplyEncoding(t *testing.T) {
	ok := okStatus()
	entries := func(n int) []*rmqpb.SendResultEntry {
		var es []*rmqpb.SendResultEntry
		for i := range n {
			es = append(es, &rmqpb.SendResultEntry{Status: ok, MessageId: fmt.Sprintf("id-%d", i), Offset: int64(i) << (i % 40)})
		}
		return es
	}
	for name, resp := range map[string]*rmqpb.SendMessageResponse{
		"empty":         {},
		"refused":       {Status: &rmqpb.Status{Code: rmqpb.Code_MESSAGE_BODY_EMPTY, Message: "message body cannot be empty"}},
		"empty status":  {Status: &rmqpb.Status{}},
		"negative code": {Status: &rmqpb.Status{Code: rmqpb.Code(-2), Message: "x"}},
		"batch":         {Status: mergeCodes([]*rmqpb.Status{ok}), Entries: entries(64)},
		"transaction": {Status: ok, Entries: []*rmqpb.SendResultEntry{{Status: ok, MessageId: "m", TransactionId: "tx-1",
			Offset: -1, RecallHandle: "recall"}}},
		"bare entries": {Entries: []*rmqpb.SendResultEntry{{}, {MessageId: strings.Repeat("m", 300)}}},
	} {
		want, err := proto.Marshal(resp)
		require.NoError(t, err)
		r := sendReply{SendMessageResponse: resp}
		got := r.AppendWire([]byte("prefix"))
		require.Equal(t, want, got[len("prefix"):], name)
		require.Equal(t, len(want), r.WireSize(), name)
		data, err := pbcodec.New().Marshal(r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(data.Materialize()), name)
		data.Free()
	}
}

// decodedReply is the response a client reads from r: its encoding,
// decoded by the generated code.
func decodedReply(t testing.TB, r *sendReply) *rmqpb.SendMessageResponse {
	t.Helper()
	b := r.AppendWire(nil)
	require.Len(t, b, r.WireSize())
	var resp rmqpb.SendMessageResponse
	require.NoError(t, proto.Unmarshal(b, &resp))
	return &resp
}

// An appended request's reply writes its entries from the outcome, with
// the bytes of the generated entries the other path builds from it.
func TestSendReplyOfOutcome(t *testing.T) {
	for _, out := range []sendOutcome{
		{status: okStatus(), ids: []string{"a", "b", "c"}, first: 0},
		{status: okStatus(), ids: []string{"x"}, first: 1 << 40},
		{status: &rmqpb.Status{Code: rmqpb.Code_MASTER_PERSISTENCE_TIMEOUT, Message: "not flushed"}, ids: []string{"p", "q"}, first: 7},
	} {
		r := &sendReply{SendMessageResponse: &rmqpb.SendMessageResponse{Status: out.topStatus()}, appended: &out}
		want, err := proto.Marshal(out.response())
		require.NoError(t, err)
		got := r.AppendWire(nil)
		require.Equal(t, want, got)
		require.Equal(t, len(want), r.WireSize())
	}
}
