package remoting

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// ErrInvalidMessage: a message the driver refuses before sending.
var ErrInvalidMessage = fmt.Errorf("remoting: invalid message: %w", rmqerr.ErrBadRequest)

// properties builds a message's property map as RocketMQ does.
func (m *Message) properties(group string) (map[string]string, error) {
	p := make(map[string]string, len(m.Properties)+6)
	for k, v := range m.Properties {
		p[k] = v
	}
	if m.Tag != "" {
		// RocketMQ brokers store such a tag as is, and no tag
		// expression can select it ("a|b" means a or b).
		if strings.Contains(m.Tag, "|") {
			return nil, fmt.Errorf("%w: tag %q holds '|' (the separator of tag expressions)", ErrInvalidMessage, m.Tag)
		}
		p[wire.PropTags] = m.Tag
	}
	if len(m.Keys) > 0 {
		for _, k := range m.Keys {
			if strings.Contains(k, " ") {
				return nil, fmt.Errorf("%w: key %q holds a space (RocketMQ joins keys with spaces)", ErrInvalidMessage, k)
			}
		}
		p[wire.PropKeys] = strings.Join(m.Keys, " ")
	}
	if m.Group != "" {
		p[wire.PropShardingKey] = m.Group
	}
	if m.TraceContext != "" {
		p[wire.PropTraceContext] = m.TraceContext
	}
	p[wire.PropUniqKey] = m.ID
	p[wire.PropWait] = "true"
	if m.Transaction {
		p[wire.PropTranMsg] = "true"
		p[wire.PropProducerGroup] = group
	}
	return p, nil
}

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
	p, err := m.properties(t.ProducerGroup)
	if err != nil {
		return SendResult{}, err
	}
	ps, err := wire.EncodeProperties(p)
	if err != nil {
		return SendResult{}, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
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
	bm := make([]wire.BatchMessage, len(msgs))
	uniq := make([]string, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = ids.Next()
		}
		uniq[i] = m.ID
		if m.Transaction {
			return nil, fmt.Errorf("%w: message %d: a transactional message cannot be sent in a batch", ErrInvalidMessage, i)
		}
		p, err := m.properties(t.ProducerGroup)
		if err != nil {
			return nil, err
		}
		delete(p, wire.PropWait)
		ps, err := wire.EncodeProperties(p)
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrInvalidMessage, i, err)
		}
		bm[i] = wire.BatchMessage{Body: m.Body, Properties: ps}
	}
	body, err := wire.AppendBatch(nil, bm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	// The batch's own properties, as the Java client's MessageBatch has
	// them: WAIT only. A broker appends them to every message of the batch
	// when it stores it, so a UNIQ_KEY here (the ids joined) would replace
	// each message's own id for its readers (RocketMQ 4.9.7 does exactly
	// that).
	hp, err := wire.EncodeProperties(map[string]string{wire.PropWait: "true"})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	h := sendHeader(t, msgs[0].Topic, hp, true)
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
			if _, clo, err := wire.DecodeOffsetMessageID(offsetIDs[i]); err == nil {
				out[i].CommitLogOffset = clo
			}
		}
	}
	return out, nil
}

func parseSendResponse(addr string, resp *wire.Command) (SendResult, error) {
	qid, err1 := strconv.ParseInt(resp.Ext[wire.RespQueueID], 10, 32)
	off, err2 := strconv.ParseInt(resp.Ext[wire.RespQueueOffset], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return SendResult{}, fmt.Errorf("remoting %s: send response: %w: %w", addr, rmqerr.ErrInternal, err)
	}
	r := SendResult{OffsetID: resp.Ext[wire.RespMsgID], QueueID: int32(qid), QueueOffset: off,
		TransactionID: resp.Ext[wire.RespTxID], BrokerVersion: Version(resp.Version)}
	if _, clo, err := wire.DecodeOffsetMessageID(r.OffsetID); err == nil {
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
