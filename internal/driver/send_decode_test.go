package driver

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/twinmq/twinmq/internal/pb/pbcodec"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// poisonPool counts the buffers returned to it and overwrites them, so
// that a decoder still referring to the received bytes reads garbage.
type poisonPool struct{ puts int }

func (p *poisonPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p *poisonPool) Put(b *[]byte) {
	p.puts++
	for i := range *b {
		(*b)[i] = 0xAA
	}
}

// decodeOwned decodes raw through UnmarshalBuffer from a pooled buffer and
// checks the buffer was freed exactly once.
func decodeOwned(t testing.TB, raw []byte) (*sendResponse, error) {
	t.Helper()
	// Only buffers above gRPC's pooling threshold (1 KiB) are pooled; smaller ones
	// are plain slices without a pool.
	data := make([]byte, len(raw), max(len(raw), 4096))
	copy(data, raw)
	pool := &poisonPool{}
	resp := &sendResponse{}
	err := resp.UnmarshalBuffer(mem.NewBuffer(&data, pool))
	if pool.puts != 1 {
		t.Fatalf("buffer freed %d times, want once (err %v)", pool.puts, err)
	}
	return resp, err
}

// comparableResult is a SendResult with its error reduced to what callers
// read from it.
type comparableResult struct {
	SendResult
	errText   string
	class     error
	retryable bool
}

func comparableResults(res []SendResult, err error) ([]comparableResult, string) {
	out := make([]comparableResult, len(res))
	for i, r := range res {
		out[i] = comparableResult{SendResult: r}
		if r.Err != nil {
			out[i].errText, out[i].retryable = r.Err.Error(), Retryable(r.Err)
			var de *Error
			if errors.As(r.Err, &de) {
				out[i].class = de.Class()
			}
			out[i].Err = nil
		}
	}
	errText := ""
	if err != nil {
		errText = err.Error() + " retryable=" + strconv.FormatBool(Retryable(err))
	}
	return out, errText
}

// requireSameDecoding checks that the hand-coded decoder and proto.Unmarshal
// followed by the generated path agree on raw: both fail, or both succeed
// with the same answer and the same results for count messages.
func requireSameDecoding(t testing.TB, raw []byte, count int) {
	t.Helper()
	var pb rmqpb.SendMessageResponse
	perr := proto.Unmarshal(raw, &pb)
	got, herr := decodeOwned(t, raw)
	if (perr == nil) != (herr == nil) {
		t.Fatalf("proto.Unmarshal: %v, hand decoder: %v, input %x", perr, herr, raw)
	}
	if herr != nil {
		if !errors.Is(herr, errMalformed) {
			t.Fatalf("untyped decode error %v", herr)
		}
		return
	}
	want := answerFromPB(&pb)
	if !reflect.DeepEqual(*want, got.sendAnswer) {
		t.Fatalf("answers differ for %x:\nproto %+v\nhand  %+v", raw, *want, got.sendAnswer)
	}
	msgs := make([]*Message, count)
	ids := make([]string, count)
	for i := range msgs {
		msgs[i] = &Message{Topic: "t", Body: []byte{1}, QueueID: int32(i%3) - 1}
		ids[i] = "id-" + strconv.Itoa(i)
	}
	wantRes, wantErr := comparableResults(normalizeSend(want, msgs, ids, "h:1", nil))
	gotRes, gotErr := comparableResults(normalizeSend(&got.sendAnswer, msgs, ids, "h:1", nil))
	if wantErr != gotErr || !reflect.DeepEqual(wantRes, gotRes) {
		t.Fatalf("results differ for %x:\nproto %v %+v\nhand  %v %+v", raw, wantErr, wantRes, gotErr, gotRes)
	}
}

// respGen draws SendMessageResponse encodings with the freedoms protobuf
// allows a sender: fields in any order, singular messages split over
// several occurrences, scalars repeated, unknown fields of every wire type
// (also under known numbers with another wire type).
type respGen struct {
	rng *rand.Rand
	// maxCount bounds the messages (and so the entries) of an answer.
	maxCount int
}

func (g respGen) str() string {
	pool := []string{"", "OK", "id-1", "msg ü€", "0A0B0C0D0E0F000000000000000000000A,0A0B", "tx-9", "recall-handle"}
	return pool[g.rng.IntN(len(pool))]
}

func (g respGen) code() rmqpb.Code {
	codes := []rmqpb.Code{rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_MULTIPLE_RESULTS, rmqpb.Code_CODE_UNSPECIFIED,
		rmqpb.Code_BAD_REQUEST, rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE, rmqpb.Code_INTERNAL_SERVER_ERROR,
		rmqpb.Code_MASTER_PERSISTENCE_TIMEOUT, rmqpb.Code_TOO_MANY_REQUESTS, rmqpb.Code_TOPIC_NOT_FOUND, 12345, -7}
	return codes[g.rng.IntN(len(codes))]
}

// unknown returns one field the decoders must skip.
func (g respGen) unknown(known ...protowire.Number) []byte {
	num := protowire.Number(6 + g.rng.IntN(30))
	if len(known) > 0 && g.rng.IntN(3) == 0 {
		num = known[g.rng.IntN(len(known))] // a known number, usually with another wire type
	}
	if g.rng.IntN(20) == 0 {
		num = protowire.MaxValidNumber
	}
	var b []byte
	switch g.rng.IntN(5) {
	case 0:
		b = protowire.AppendTag(b, num, protowire.VarintType)
		b = protowire.AppendVarint(b, g.rng.Uint64())
	case 1:
		b = protowire.AppendTag(b, num, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, g.rng.Uint32())
	case 2:
		b = protowire.AppendTag(b, num, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, g.rng.Uint64())
	case 3:
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("\xff\xfeunknown"))
	default:
		b = protowire.AppendTag(b, num, protowire.StartGroupType)
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 9)
		b = protowire.AppendTag(b, num, protowire.EndGroupType)
	}
	return b
}

// join shuffles fields and concatenates them, with unknown fields among
// them now and then.
func (g respGen) join(fields [][]byte, known ...protowire.Number) []byte {
	for range g.rng.IntN(3) {
		if g.rng.IntN(2) == 0 {
			fields = append(fields, g.unknown(known...))
		}
	}
	g.rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	var b []byte
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

func lenField(num protowire.Number, v []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func varintField(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func (g respGen) status() []byte {
	var fields [][]byte
	for range 1 + g.rng.IntN(2) { // a repeated scalar: the last wins
		if g.rng.IntN(4) != 0 {
			fields = append(fields, varintField(fieldStatusCode, uint64(int64(g.code()))))
		}
		if g.rng.IntN(3) != 0 {
			fields = append(fields, lenField(fieldStatusMessage, []byte(g.str())))
		}
	}
	return g.join(fields, fieldStatusCode, fieldStatusMessage)
}

// statusFields are one status, sometimes split over two occurrences that
// merge.
func (g respGen) statusFields(num protowire.Number) [][]byte {
	switch g.rng.IntN(5) {
	case 0:
		return nil
	case 1:
		return [][]byte{lenField(num, g.status()), lenField(num, g.status())}
	default:
		return [][]byte{lenField(num, g.status())}
	}
}

func (g respGen) entry() []byte {
	fields := g.statusFields(fieldEntryStatus)
	if g.rng.IntN(2) == 0 {
		fields = append(fields, lenField(fieldEntryMessageID, []byte(g.str())))
	}
	if g.rng.IntN(3) == 0 {
		fields = append(fields, lenField(fieldEntryTransactionID, []byte(g.str())))
	}
	for range g.rng.IntN(3) {
		fields = append(fields, varintField(fieldEntryOffset, uint64(g.rng.Int64N(1<<40)-1<<20)))
	}
	if g.rng.IntN(3) == 0 {
		fields = append(fields, lenField(fieldEntryRecallHandle, []byte(g.str())))
	}
	return g.join(fields, fieldEntryStatus, fieldEntryMessageID, fieldEntryTransactionID, fieldEntryOffset, fieldEntryRecallHandle)
}

// response returns an encoding and the message count it is meant for.
func (g respGen) response() ([]byte, int) {
	count := 1 + g.rng.IntN(g.maxCount)
	entries := count
	switch g.rng.IntN(6) {
	case 0:
		entries = 1
	case 1:
		entries = 0
	case 2:
		entries = g.rng.IntN(g.maxCount + 5)
	}
	fields := g.statusFields(fieldRespStatus)
	status := len(fields)
	for range entries {
		fields = append(fields, lenField(fieldRespEntries, g.entry()))
	}
	// Entries are a repeated field: their order is theirs, but the
	// status and unknown fields may come anywhere among them.
	if g.rng.IntN(2) == 0 {
		for range g.rng.IntN(3) {
			fields = append(fields, g.unknown(fieldRespStatus, fieldRespEntries))
		}
		var b []byte
		for _, i := range g.rng.Perm(len(fields)) {
			if i < status || i >= status+entries {
				b = append(b, fields[i]...)
			}
		}
		for _, f := range fields[status : status+entries] {
			b = append(b, f...)
		}
		return b, count
	}
	return g.join(fields, fieldRespStatus, fieldRespEntries), count
}

// The hand decoder against proto.Unmarshal on many generated answers, their
// truncations and corruptions.
func TestSendResponseDecodeMatchesProto(t *testing.T) {
	g := respGen{rng: rand.New(rand.NewPCG(7, 8)), maxCount: 40}
	for range 3000 {
		raw, count := g.response()
		requireSameDecoding(t, raw, count)
		// Every cut of a short answer; a few of a long one.
		step := max(1, len(raw)/20)
		for cut := 0; cut < len(raw); cut += step {
			requireSameDecoding(t, raw[:cut], count)
		}
		if len(raw) > 0 {
			bad := append([]byte(nil), raw...)
			bad[g.rng.IntN(len(bad))] ^= byte(1 + g.rng.IntN(255))
			requireSameDecoding(t, bad, count)
		}
	}
}

// Hand-picked answers: the two shapes, failures, and the malformed inputs
// protobuf rejects.
func TestSendResponseDecodeCases(t *testing.T) {
	marshal := func(r *rmqpb.SendMessageResponse) []byte {
		b, err := proto.Marshal(r)
		require.NoError(t, err)
		return b
	}
	okEntry := func(off int64) *rmqpb.SendResultEntry {
		return &rmqpb.SendResultEntry{Status: ok(), MessageId: "m", Offset: off, TransactionId: "tx", RecallHandle: "rh"}
	}
	valid := map[string]struct {
		raw   []byte
		count int
	}{
		"empty":           {nil, 1},
		"per message":     {marshal(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{okEntry(1), okEntry(2), okEntry(3)}}), 3},
		"proxy batch":     {marshal(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{okEntry(40)}}), 4},
		"partial failure": {marshal(&rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_MULTIPLE_RESULTS}, Entries: []*rmqpb.SendResultEntry{okEntry(1), {Status: &rmqpb.Status{Code: rmqpb.Code_MESSAGE_BODY_TOO_LARGE, Message: "big"}}}}), 2},
		"batch failed":    {marshal(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: &rmqpb.Status{Code: rmqpb.Code_INTERNAL_SERVER_ERROR}}}}), 5},
		"no entries":      {marshal(&rmqpb.SendMessageResponse{Status: ok()}), 2},
		"entry no status": {marshal(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Offset: 3}}}), 1},
		"top failure":     {marshal(&rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_FORBIDDEN, Message: "no"}}), 1},
		"status merged": {append(lenField(fieldRespStatus, varintField(fieldStatusCode, uint64(rmqpb.Code_BAD_REQUEST))),
			lenField(fieldRespStatus, lenField(fieldStatusMessage, []byte("why")))...), 1},
		"negative offset":  {marshal(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{okEntry(-5)}}), 1},
		"unknown group":    {append(protowire.AppendTag(protowire.AppendTag(nil, 9, protowire.StartGroupType), 9, protowire.EndGroupType), marshal(&rmqpb.SendMessageResponse{Status: ok()})...), 1},
		"overlong varint":  {append(protowire.AppendTag(nil, 1, protowire.BytesType), 0x83, 0x80, 0x80, 0x00, 0x08, 0xc8, 0x01), 1},
		"wrong type known": {append(protowire.AppendTag(nil, fieldRespEntries, protowire.Fixed64Type), 1, 2, 3, 4, 5, 6, 7, 8), 1},
	}
	for name, tc := range valid {
		var pb rmqpb.SendMessageResponse
		require.NoError(t, proto.Unmarshal(tc.raw, &pb), name)
		_, err := decodeOwned(t, tc.raw)
		require.NoError(t, err, name)
		requireSameDecoding(t, tc.raw, tc.count)
	}
	invalid := map[string][]byte{
		"field zero":          {0x02, 0x00},
		"field too large":     protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType),
		"end group":           protowire.AppendTag(nil, 3, protowire.EndGroupType),
		"reserved wire type":  {0x0e},
		"truncated length":    {0x12, 0x05, 0x08},
		"truncated varint":    {0x08, 0xff},
		"varint overflow":     {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"open group":          protowire.AppendTag(nil, 9, protowire.StartGroupType),
		"bad utf8 message id": lenField(fieldRespEntries, lenField(fieldEntryMessageID, []byte{0xff})),
		"bad utf8 status":     lenField(fieldRespStatus, lenField(fieldStatusMessage, []byte("ok\xc3"))),
		"bad utf8 tx":         lenField(fieldRespEntries, lenField(fieldEntryTransactionID, []byte{0xc0, 0x80})),
		"bad utf8 recall":     lenField(fieldRespEntries, lenField(fieldEntryRecallHandle, []byte{0xed, 0xa0, 0x80})),
		"bad nested tag":      lenField(fieldRespEntries, []byte{0x00}),
		"truncated nested":    lenField(fieldRespEntries, lenField(fieldEntryStatus, []byte{0x08})),
	}
	for name, raw := range invalid {
		var pb rmqpb.SendMessageResponse
		require.Error(t, proto.Unmarshal(raw, &pb), name)
		_, err := decodeOwned(t, raw)
		require.ErrorIs(t, err, errMalformed, name)
		requireSameDecoding(t, raw, 1)
	}
}

// Through the codec, a response replaces what a reused value held.
func TestSendResponseThroughCodec(t *testing.T) {
	c := pbcodec.New()
	resp := &sendResponse{}
	first, err := proto.Marshal(&rmqpb.SendMessageResponse{Status: ok(), Entries: []*rmqpb.SendResultEntry{{Status: ok(), Offset: 1}, {Status: ok(), Offset: 2}}})
	require.NoError(t, err)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(first)}, resp))
	require.Len(t, resp.entries, 2)
	second, err := proto.Marshal(&rmqpb.SendMessageResponse{Status: &rmqpb.Status{Code: rmqpb.Code_FORBIDDEN, Message: "denied"}})
	require.NoError(t, err)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(second)}, resp))
	require.Equal(t, sendAnswer{status: wireStatus{set: true, code: rmqpb.Code_FORBIDDEN, message: "denied"}}, resp.sendAnswer)
}

// FuzzSendResponseDecode: on any bytes the hand decoder and proto.Unmarshal
// with the generated path agree on failure, answer and results.
func FuzzSendResponseDecode(f *testing.F) {
	// Small seeds: the fuzzer minimizes every input that finds new
	// coverage, and its time grows with the input.
	g := respGen{rng: rand.New(rand.NewPCG(9, 10)), maxCount: 3}
	for range 20 {
		raw, count := g.response()
		f.Add(raw, uint8(count))
	}
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01}, uint8(1))
	f.Add([]byte{0xff, 0x01}, uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, n uint8) {
		requireSameDecoding(t, raw, int(n%40)+1)
	})
}

func benchResponse(b *testing.B, entries int) []byte {
	resp := &rmqpb.SendMessageResponse{Status: ok()}
	for i := range entries {
		resp.Entries = append(resp.Entries, &rmqpb.SendResultEntry{Status: ok(), MessageId: "0A0B0C0D0E0F000000000000000000000A", Offset: int64(1000 + i)})
	}
	raw, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkDecodeSend measures decoding the answer to a send of 32
// messages through the codec: the embedded broker's shape (an entry per
// message) and the proxy's (one entry), into the generated types and by
// hand. The normalization that follows is the same code for both.
func BenchmarkDecodeSend(b *testing.B) {
	const n = 32
	codec := pbcodec.New()
	for _, shape := range []struct {
		name    string
		entries int
	}{{"per-message", n}, {"proxy", 1}} {
		raw := benchResponse(b, shape.entries)
		b.Run(shape.name+"/generated", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp := &rmqpb.SendMessageResponse{}
				if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(shape.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp := &sendResponse{}
				if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
