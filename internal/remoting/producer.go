package remoting

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// Message is a message to send over remoting.
type Message struct {
	Topic string
	Tag   string
	Keys  []string
	// Group is the message group (FIFO), sent as the sharding key.
	Group        string
	TraceContext string
	// Properties are user properties (a lane's property among them).
	Properties map[string]string
	Body       []byte
	// ID is the message id (UNIQ_KEY); Send fills it when empty.
	ID string
	// Transaction makes a half message, stored but not delivered until
	// EndTransaction commits it (or a check-back resolves it).
	Transaction bool
}

// SendTarget names where a send goes.
type SendTarget struct {
	Addr          string
	BrokerName    string
	QueueID       int32
	ProducerGroup string
}

// SendResult is one message's outcome.
type SendResult struct {
	ID          string // the client's message id (UNIQ_KEY)
	OffsetID    string // the broker's id of the stored record
	QueueID     int32
	QueueOffset int64
	// TransactionID names a half message's transaction (EndTransaction).
	TransactionID string
	// CommitLogOffset is where the broker stored the message, read from
	// OffsetID (RocketMQ brokers build it from the store address and this
	// offset); 0 when OffsetID is not of that form (the embedded broker
	// answers the message's own id). END_TRANSACTION needs it: a RocketMQ
	// broker finds the half message by it.
	CommitLogOffset int64
	// BrokerVersion is the version field of the broker's response.
	BrokerVersion Version
}

// IDGenerator makes message ids in the 32 hex digit form of RocketMQ's
// remoting clients: 4 bytes of host, 2 of pid, 4 of instance, 4 of
// milliseconds since the generator started and 2 of counter.
type IDGenerator struct {
	prefix [10]byte
	start  time.Time
	seq    atomic.Uint32
}

// NewIDGenerator returns a generator with a random host and instance part.
func NewIDGenerator() *IDGenerator {
	g := &IDGenerator{start: time.Now()}
	_, _ = rand.Read(g.prefix[:])
	binary.BigEndian.PutUint16(g.prefix[4:], uint16(os.Getpid()))
	return g
}

// Next returns a fresh id.
func (g *IDGenerator) Next() string {
	var b [16]byte
	copy(b[:], g.prefix[:])
	binary.BigEndian.PutUint32(b[10:], uint32(time.Since(g.start).Milliseconds()))
	binary.BigEndian.PutUint16(b[14:], uint16(g.seq.Add(1)))
	const digits = "0123456789ABCDEF"
	var id [32]byte
	for i, v := range b {
		id[2*i], id[2*i+1] = digits[v>>4], digits[v&15]
	}
	return string(id[:])
}

// ErrInvalidMessage: a message the driver refuses before sending.
var ErrInvalidMessage = fmt.Errorf("remoting: invalid message: %w", rmqerr.ErrBadRequest)

// prop is one property pair. The pair named KEYS of a message with keys
// has no v: the keys are written, joined with spaces.
type prop struct{ k, v string }

// maxStackProps is how many pairs appendProperties sorts without a heap
// allocation.
const maxStackProps = 16

// appendProperties appends m's properties in RocketMQ's encoding (see
// wire.EncodeProperties) to dst, with no map: the user's properties, then
// tag, keys, sharding key (the message group), trace context, UNIQ_KEY,
// WAIT=true when wait (a batch's messages carry none: the batch has it) and
// the transaction's pair, the system ones replacing a user property of the
// same name (and a user's WAIT dropped either way), written in key order.
// The bytes are those of wire.EncodeProperties over the same map.
func (m *Message) appendProperties(dst []byte, group string, wait bool) ([]byte, error) {
	if m.Tag != "" && strings.Contains(m.Tag, "|") {
		// RocketMQ brokers store such a tag as is, and no tag
		// expression can select it ("a|b" means a or b).
		return dst, fmt.Errorf("%w: tag %q holds '|' (the separator of tag expressions)", ErrInvalidMessage, m.Tag)
	}
	for _, k := range m.Keys {
		if strings.Contains(k, " ") {
			return dst, fmt.Errorf("%w: key %q holds a space (RocketMQ joins keys with spaces)", ErrInvalidMessage, k)
		}
	}
	var arr [maxStackProps]prop
	ps := arr[:0]
	if m.Tag != "" {
		ps = append(ps, prop{k: wire.PropTags, v: m.Tag})
	}
	if len(m.Keys) > 0 {
		ps = append(ps, prop{k: wire.PropKeys}) // the keys, written below
	}
	if m.Group != "" {
		ps = append(ps, prop{k: wire.PropShardingKey, v: m.Group})
	}
	if m.TraceContext != "" {
		ps = append(ps, prop{k: wire.PropTraceContext, v: m.TraceContext})
	}
	ps = append(ps, prop{k: wire.PropUniqKey, v: m.ID})
	if wait {
		ps = append(ps, prop{k: wire.PropWait, v: "true"})
	}
	if m.Transaction {
		ps = append(ps, prop{k: wire.PropTranMsg, v: "true"}, prop{k: wire.PropProducerGroup, v: group})
	}
	sys := len(ps)
user:
	for k, v := range m.Properties {
		if k == wire.PropWait {
			continue
		}
		for i := range sys {
			if ps[i].k == k {
				continue user
			}
		}
		ps = append(ps, prop{k: k, v: v})
	}
	slices.SortFunc(ps, func(a, b prop) int { return strings.Compare(a.k, b.k) })
	for i := range ps {
		p := &ps[i]
		if p.k != wire.PropKeys || len(m.Keys) == 0 {
			if err := wire.CheckProperty(p.k, p.v); err != nil {
				return dst, err
			}
			dst = wire.AppendProperty(dst, p.k, p.v)
			continue
		}
		// The message's keys (a user's KEYS gave way to them). They hold
		// no space; their joined value holds a separator exactly when one
		// of them does.
		for _, key := range m.Keys {
			if err := wire.CheckProperty(p.k, key); err != nil {
				return dst, err
			}
		}
		dst = append(dst, p.k...)
		dst = append(dst, 1)
		for j, key := range m.Keys {
			if j > 0 {
				dst = append(dst, ' ')
			}
			dst = append(dst, key...)
		}
		dst = append(dst, 2)
	}
	return dst, nil
}

// batchProperties are a batch's own properties (the header's), the
// encoding of WAIT=true.
const batchProperties = wire.PropWait + "\x01true\x02"

// maxPooledBody is the largest batch body buffer kept for reuse.
const maxPooledBody = 4 << 20

func checkMessages(msgs []*Message) error {
	if len(msgs) == 0 {
		return fmt.Errorf("%w: no message", ErrInvalidMessage)
	}
	for i, m := range msgs {
		if m.Topic != msgs[0].Topic {
			return fmt.Errorf("%w: message %d is for topic %q, the batch for %q", ErrInvalidMessage, i, m.Topic, msgs[0].Topic)
		}
		if len(m.Body) == 0 {
			return fmt.Errorf("%w: message %d has an empty body", ErrInvalidMessage, i)
		}
	}
	return nil
}

func sendHeader(t SendTarget, topic string, props string, batch bool) *wire.Header {
	return &wire.Header{Code: wire.CodeSendMessageV2, Ext: map[string]string{
		wire.SendProducerGroup: t.ProducerGroup,
		wire.SendTopic:         topic,
		wire.SendDefaultTopic:  "TBW102",
		wire.SendDefaultQueues: "4",
		wire.SendQueueID:       strconv.Itoa(int(t.QueueID)),
		wire.SendSysFlag:       "0",
		wire.SendBornTimestamp: strconv.FormatInt(time.Now().UnixMilli(), 10),
		wire.SendFlag:          "0",
		wire.SendProperties:    props,
		wire.SendReconsume:     "0",
		wire.SendUnitMode:      "false",
		wire.SendBatch:         strconv.FormatBool(batch),
		wire.SendBrokerName:    t.BrokerName,
	}}
}

// Send sends one message with SEND_MESSAGE_V2 to the target queue.
func (c *Client) Send(ctx context.Context, ids *IDGenerator, t SendTarget, m *Message) (SendResult, error) {
	if err := checkMessages([]*Message{m}); err != nil {
		return SendResult{}, err
	}
	if m.ID == "" {
		m.ID = ids.Next()
	}
	var pb [256]byte
	pp, err := m.appendProperties(pb[:0], t.ProducerGroup, true)
	if err != nil {
		if errors.Is(err, ErrInvalidMessage) {
			return SendResult{}, err
		}
		return SendResult{}, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	ps := string(pp)
	if len(ps) > 0x7FFF {
		return SendResult{}, fmt.Errorf("%w: properties of %d bytes exceed RocketMQ's 32767", ErrInvalidMessage, len(ps))
	}
	h := sendHeader(t, m.Topic, ps, false)
	if m.Transaction {
		h.Ext[wire.SendSysFlag] = strconv.Itoa(int(wire.SysTransactionPrepare))
	}
	resp, err := c.Invoke(ctx, t.Addr, h, m.Body)
	if err != nil {
		return SendResult{}, err
	}
	if err := CheckResponse(t.Addr, resp); err != nil {
		return SendResult{}, err
	}
	res, err := parseSendResponse(t.Addr, resp)
	if err != nil {
		return SendResult{}, err
	}
	res.ID = m.ID
	if res.OffsetID == res.ID {
		// The broker answered the client's own id (the embedded broker
		// does): it holds no commit log offset.
		res.CommitLogOffset = 0
	}
	if m.Transaction && res.TransactionID == "" {
		// 5.x brokers answer the transaction id (the message's UNIQ_KEY);
		// 4.x brokers answer none and take the same value from the
		// client, as RocketMQ's 4.x producer sends it.
		res.TransactionID = m.ID
	}
	return res, nil
}

// SendBatch sends messages of one topic with SEND_BATCH_MESSAGE to the
// target queue. They are stored contiguously; result i is message i's id
// and offset (the first offset plus i).
func (c *Client) SendBatch(ctx context.Context, ids *IDGenerator, t SendTarget, msgs []*Message) ([]SendResult, error) {
	if err := checkMessages(msgs); err != nil {
		return nil, err
	}
	var err error
	bp := c.bodies.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBody {
			c.bodies.Put(bp)
		}
	}()
	size := 0
	for _, m := range msgs {
		size += 22 + len(m.Body) + 128
	}
	body := slices.Grow((*bp)[:0], size)
	uniq := make([]string, len(msgs))
	body, err = appendBatchBody(body, ids, t.ProducerGroup, msgs, uniq)
	*bp = body
	if err != nil {
		return nil, err
	}
	// The batch's own properties, as the Java client's MessageBatch has
	// them: WAIT only. A broker appends them to every message of the batch
	// when it stores it, so a UNIQ_KEY here (the ids joined) would replace
	// each message's own id for its readers (RocketMQ 4.9.7 does exactly
	// that).
	h := sendHeader(t, msgs[0].Topic, batchProperties, true)
	h.Code = wire.CodeSendBatchMessage
	resp, err := c.Invoke(ctx, t.Addr, h, body)
	if err != nil {
		return nil, err
	}
	if err := CheckResponse(t.Addr, resp); err != nil {
		return nil, err
	}
	first, err := parseSendResponse(t.Addr, resp)
	if err != nil {
		return nil, err
	}
	offsetIDs := strings.Split(first.OffsetID, ",")
	out := make([]SendResult, len(msgs))
	for i := range msgs {
		out[i] = SendResult{ID: uniq[i], QueueID: first.QueueID, QueueOffset: first.QueueOffset + int64(i), BrokerVersion: first.BrokerVersion}
		if len(offsetIDs) == len(msgs) {
			out[i].OffsetID = offsetIDs[i]
			if clo, ok := wire.OffsetOfMessageID(offsetIDs[i]); ok && offsetIDs[i] != uniq[i] {
				out[i].CommitLogOffset = clo
			}
		}
	}
	return out, nil
}

// appendBatchBody appends the batch body of msgs (wire.AppendBatch's
// encoding), giving each message without an id a fresh one and its id in
// uniq[i]. It checks the messages in order and fails at the first refused,
// as the encoding through a property map did; properties too long for a
// short are refused once every message passed the other checks.
func appendBatchBody(body []byte, ids *IDGenerator, group string, msgs []*Message, uniq []string) ([]byte, error) {
	var tooLong error
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = ids.Next()
		}
		uniq[i] = m.ID
		if m.Transaction {
			return body, fmt.Errorf("%w: message %d: a transactional message cannot be sent in a batch", ErrInvalidMessage, i)
		}
		start := len(body)
		body = wire.StartBatchMessage(body, 0, m.Body)
		var err error
		body, err = m.appendProperties(body, group, false)
		if err != nil {
			if errors.Is(err, ErrInvalidMessage) {
				return body, err
			}
			return body, fmt.Errorf("%w: message %d: %w", ErrInvalidMessage, i, err)
		}
		if err := wire.FinishBatchMessage(body, start, i); err != nil && tooLong == nil {
			tooLong = err
		}
	}
	if tooLong != nil {
		return body, fmt.Errorf("%w: %w", ErrInvalidMessage, tooLong)
	}
	return body, nil
}

func parseSendResponse(addr string, resp *wire.Command) (SendResult, error) {
	qid, err1 := strconv.ParseInt(resp.Ext[wire.RespQueueID], 10, 32)
	off, err2 := strconv.ParseInt(resp.Ext[wire.RespQueueOffset], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return SendResult{}, fmt.Errorf("remoting %s: send response: %w: %w", addr, rmqerr.ErrInternal, err)
	}
	r := SendResult{OffsetID: resp.Ext[wire.RespMsgID], QueueID: int32(qid), QueueOffset: off,
		TransactionID: resp.Ext[wire.RespTxID], BrokerVersion: Version(resp.Version)}
	if clo, ok := wire.OffsetOfMessageID(r.OffsetID); ok {
		r.CommitLogOffset = clo
	}
	return r, nil
}

type heartbeatData struct {
	ClientID        string         `json:"clientID"`
	ProducerDataSet []producerData `json:"producerDataSet"`
	ConsumerDataSet []any          `json:"consumerDataSet"`
}

type producerData struct {
	GroupName string `json:"groupName"`
}

// Heartbeat tells the broker at addr that clientID produces for the groups
// (HEART_BEAT), so that it can ask the client to check transactions.
func (c *Client) Heartbeat(ctx context.Context, addr, clientID string, producerGroups []string) error {
	hb := heartbeatData{ClientID: clientID, ProducerDataSet: []producerData{}, ConsumerDataSet: []any{}}
	for _, g := range producerGroups {
		hb.ProducerDataSet = append(hb.ProducerDataSet, producerData{GroupName: g})
	}
	body, err := json.Marshal(&hb)
	if err != nil {
		return err
	}
	resp, err := c.Invoke(ctx, addr, &wire.Header{Code: wire.CodeHeartbeat}, body)
	if err != nil {
		return err
	}
	return CheckResponse(addr, resp)
}

// Unregister removes clientID from a producer group at addr
// (UNREGISTER_CLIENT).
func (c *Client) Unregister(ctx context.Context, addr, clientID, producerGroup string) error {
	resp, err := c.Invoke(ctx, addr, &wire.Header{Code: wire.CodeUnregisterClient, Ext: map[string]string{
		"clientID": clientID, "producerGroup": producerGroup,
	}}, nil)
	if err != nil {
		return err
	}
	return CheckResponse(addr, resp)
}
