package txn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/store"
)

// Manager keeps the pending transactions of one broker. All methods are safe
// for concurrent use.
type Manager struct {
	opts Options
	st   *store.Store
	log  *zap.Logger

	mu      sync.Mutex
	pending map[int64]*pending
	planned time.Time // when the check loop next looks; zero while it scans or when idle

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	bg     sync.WaitGroup
	closeM sync.Mutex
	closed bool
}

// pending is one half message not yet resolved.
type pending struct {
	txID      string
	msgID     string
	topic     string // real topic
	group     string
	checks    int
	nextCheck time.Time
	resolving bool // End or a discard is at work on it
	checking  bool // the checker is at work on it
}

// Prepared is the outcome of Prepare.
type Prepared struct {
	TransactionID string
	// HalfOffset is the queue offset of the half message in HalfTopic.
	HalfOffset int64
}

// Open rebuilds the pending transactions from the half and op topics and
// starts the check-back loop.
func Open(ctx context.Context, opts Options) (*Manager, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: o, st: o.Store, log: o.Logger, pending: map[int64]*pending{}, wake: make(chan struct{}, 1)}
	if err := m.rebuild(ctx); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.bg.Add(1)
	go m.checkLoop()
	return m, nil
}

// readAll calls fn with every message of topic's queue 0.
func readAll(ctx context.Context, st *store.Store, topic string, fn func(*store.StoredMessage)) error {
	off, max := st.Offsets(topic, 0)
	for off < max {
		msgs, err := st.Read(ctx, topic, 0, off, 256, 4<<20)
		var rangeErr *store.OffsetRangeError
		if errors.As(err, &rangeErr) && off < rangeErr.Min {
			off = rangeErr.Min
			continue
		}
		if err != nil {
			return fmt.Errorf("txn: read %s at %d: %w", topic, off, err)
		}
		if len(msgs) == 0 {
			break
		}
		for i := range msgs {
			fn(&msgs[i])
		}
		off = msgs[len(msgs)-1].QueueOffset + 1
	}
	return nil
}

func (m *Manager) rebuild(ctx context.Context) error {
	type opState struct {
		final  bool
		checks int
	}
	ops := map[int64]*opState{}
	err := readAll(ctx, m.st, OpTopic, func(sm *store.StoredMessage) {
		off, err := strconv.ParseInt(string(sm.Body), 10, 64)
		if err != nil {
			m.log.Warn("txn: op record with a bad body", zap.Int64("op_offset", sm.QueueOffset))
			return
		}
		s := ops[off]
		if s == nil {
			s = &opState{}
			ops[off] = s
		}
		switch sm.Properties[propOp] {
		case "check":
			n, _ := strconv.Atoi(sm.Properties[propOpChecks])
			s.checks = max(s.checks, n)
		default:
			s.final = true
		}
	})
	if err != nil {
		return err
	}
	now := time.Now()
	err = readAll(ctx, m.st, HalfTopic, func(sm *store.StoredMessage) {
		s := ops[sm.QueueOffset]
		if s != nil && s.final {
			return
		}
		p := m.newPending(sm, now)
		if s != nil {
			p.checks = s.checks
		}
		m.pending[sm.QueueOffset] = p
	})
	if err != nil {
		return err
	}
	m.log.Info("txn: pending transactions rebuilt", zap.Int("pending", len(m.pending)))
	return nil
}

// newPending makes the state of a half message; its first check is due
// Timeout (or its recovery duration) after it was stored.
func (m *Manager) newPending(sm *store.StoredMessage, now time.Time) *pending {
	wait := m.opts.Timeout
	if sec, err := strconv.ParseInt(sm.Properties[PropRecovery], 10, 64); err == nil && time.Duration(sec)*time.Second > wait {
		wait = time.Duration(sec) * time.Second
	}
	first := time.UnixMilli(sm.StoreTimestamp).Add(wait)
	return &pending{
		txID:      transactionID(sm.QueueOffset, sm.Properties),
		msgID:     sm.Properties[PropUniqKey],
		topic:     sm.Properties[PropRealTopic],
		group:     sm.Properties[PropProducerGroup],
		nextCheck: first,
	}
}

// Prepare stores msg as a half message for msg.Topic / msg.QueueID and
// returns its transaction id.
func (m *Manager) Prepare(ctx context.Context, msg store.Message) (Prepared, error) {
	if m.isClosed() {
		return Prepared{}, ErrClosed
	}
	if msg.Topic == "" || msg.QueueID < 0 {
		return Prepared{}, fmt.Errorf("%w: destination %q/%d", ErrInvalidMessage, msg.Topic, msg.QueueID)
	}
	if systemTopic(msg.Topic) {
		return Prepared{}, fmt.Errorf("%w: destination %q is a topic of the transaction store itself", ErrInvalidMessage, msg.Topic)
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Prepared{}, fmt.Errorf("txn: transaction id: %w", err)
	}
	// The id is the half message's offset, known after the append, and a
	// nonce kept in the half message, so a rebuild derives the same id.
	nonceHex := strings.ToUpper(hex.EncodeToString(nonce[:]))
	props := make(map[string]string, len(msg.Properties)+4)
	maps.Copy(props, msg.Properties)
	props[PropRealTopic] = msg.Topic
	props[PropRealQueue] = strconv.Itoa(int(msg.QueueID))
	props[propNonce] = nonceHex
	if props[PropProducerGroup] == "" {
		props[PropProducerGroup] = msg.Topic
	}
	half := msg
	half.Topic = HalfTopic
	half.QueueID = 0
	half.Flags |= FlagPrepared
	half.Properties = props
	res, err := m.st.Append(ctx, []store.Message{half})
	if err != nil && !errors.Is(err, store.ErrNotDurable) {
		return Prepared{}, fmt.Errorf("txn: store half message: %w", err)
	}
	sm := &store.StoredMessage{Message: half, QueueOffset: res.FirstOffset, StoreTimestamp: res.StoreTimestamp}
	p := m.newPending(sm, time.Now())
	m.mu.Lock()
	m.pending[res.FirstOffset] = p
	// Wake the check loop only when this one is due before it would look.
	wake := m.planned.IsZero() || p.nextCheck.Before(m.planned)
	m.mu.Unlock()
	if wake {
		m.kick()
	}
	return Prepared{TransactionID: p.txID, HalfOffset: res.FirstOffset}, err
}

// transactionID is the id of the half message at off.
func transactionID(off int64, props map[string]string) string {
	return fmt.Sprintf("%016X%s", off, props[propNonce])
}

func (m *Manager) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// parseID returns the half offset a transaction id names.
func parseID(txID string) (int64, error) {
	if len(txID) != 32 {
		return 0, fmt.Errorf("%w: %q", ErrInvalidTransactionID, txID)
	}
	off, err := strconv.ParseUint(txID[:16], 16, 63)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrInvalidTransactionID, txID)
	}
	return int64(off), nil
}

// End resolves a transaction. messageID and topic, when not empty, must be
// those of the half message. Unknown leaves it pending.
func (m *Manager) End(ctx context.Context, txID, messageID, topic string, r Resolution) error {
	if m.isClosed() {
		return ErrClosed
	}
	if r != Unknown && r != Commit && r != Rollback {
		return fmt.Errorf("%w: resolution %d", ErrInvalidResolution, int(r))
	}
	off, err := parseID(txID)
	if err != nil {
		return err
	}
	m.mu.Lock()
	p := m.pending[off]
	if p == nil || p.txID != txID {
		m.mu.Unlock()
		return m.resolvedOrUnknown(ctx, off, txID, messageID, topic)
	}
	if (messageID != "" && messageID != p.msgID) || (topic != "" && topic != p.topic) {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s does not belong to message %q of topic %q", ErrInvalidTransactionID, txID, messageID, topic)
	}
	if r == Unknown {
		m.mu.Unlock()
		return nil
	}
	if p.resolving {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s is being resolved", ErrResolved, txID)
	}
	p.resolving = true
	m.mu.Unlock()

	err = m.resolve(ctx, off, r)
	m.mu.Lock()
	if err == nil {
		delete(m.pending, off)
	} else {
		p.resolving = false
	}
	m.mu.Unlock()
	return err
}

// resolvedOrUnknown tells a transaction resolved earlier (ErrResolved) from
// an id that names nothing (ErrInvalidTransactionID).
func (m *Manager) resolvedOrUnknown(ctx context.Context, off int64, txID, messageID, topic string) error {
	half, err := m.readHalf(ctx, off)
	if err == nil && transactionID(off, half.Properties) == txID &&
		(messageID == "" || messageID == half.Properties[PropUniqKey]) &&
		(topic == "" || topic == half.Properties[PropRealTopic]) {
		return fmt.Errorf("%w: %s", ErrResolved, txID)
	}
	return fmt.Errorf("%w: no transaction %s", ErrInvalidTransactionID, txID)
}

// resolve commits or rolls back the half message at off.
func (m *Manager) resolve(ctx context.Context, off int64, r Resolution) error {
	ctx = context.WithoutCancel(ctx) // a half-done commit is worse than a late one
	if r == Commit {
		half, err := m.readHalf(ctx, off)
		if err != nil {
			return err
		}
		real, err := realMessage(half.Message)
		if err != nil {
			return err
		}
		if err := m.opts.Deliverer.Deliver(ctx, real); err != nil {
			return fmt.Errorf("txn: deliver committed message: %w", err)
		}
	}
	return m.writeOp(ctx, off, r.String(), 0)
}

func (m *Manager) readHalf(ctx context.Context, off int64) (store.StoredMessage, error) {
	msgs, err := m.st.Read(ctx, HalfTopic, 0, off, 1, 0)
	if err == nil && len(msgs) == 0 || errors.Is(err, store.ErrOffsetOutOfRange) && m.notYetVisible(off) {
		// Appended but not yet indexed (an End right after Prepare).
		if err = m.st.WaitDispatched(ctx); err == nil {
			msgs, err = m.st.Read(ctx, HalfTopic, 0, off, 1, 0)
		}
	}
	if err != nil {
		return store.StoredMessage{}, fmt.Errorf("txn: read half message %d: %w", off, err)
	}
	if len(msgs) != 1 || msgs[0].QueueOffset != off {
		return store.StoredMessage{}, fmt.Errorf("txn: half message %d not readable: %w", off, ErrInvalidTransactionID)
	}
	return msgs[0], nil
}

// notYetVisible: off is past the half topic's visible end.
func (m *Manager) notYetVisible(off int64) bool {
	_, max := m.st.Offsets(HalfTopic, 0)
	return off >= max
}

// realMessage turns a half message into the message for its destination.
func realMessage(half store.Message) (store.Message, error) {
	topic := half.Properties[PropRealTopic]
	q, err := strconv.ParseInt(half.Properties[PropRealQueue], 10, 32) // a queue id is an int32
	if topic == "" || err != nil || q < 0 {
		return store.Message{}, fmt.Errorf("%w: REAL_TOPIC %q REAL_QID %q", ErrInvalidMessage, topic, half.Properties[PropRealQueue])
	}
	props := maps.Clone(half.Properties)
	delete(props, PropRealTopic)
	delete(props, PropRealQueue)
	delete(props, PropCheckTimes)
	delete(props, propNonce)
	half.Topic = topic
	half.QueueID = int32(q)
	half.Flags = half.Flags&^FlagPrepared | FlagCommit
	half.Properties = props
	return half, nil
}

func (m *Manager) writeOp(ctx context.Context, off int64, kind string, checks int) error {
	op := store.Message{
		Topic:      OpTopic,
		Tag:        opTag,
		Properties: map[string]string{propOp: kind},
		Body:       []byte(strconv.FormatInt(off, 10)),
	}
	if kind == "check" {
		op.Properties[propOpChecks] = strconv.Itoa(checks)
	}
	if _, err := m.st.Append(ctx, []store.Message{op}); err != nil && !errors.Is(err, store.ErrNotDurable) {
		return fmt.Errorf("txn: write %s op for %d: %w", kind, off, err)
	}
	return nil
}

// Pending returns the number of unresolved transactions.
func (m *Manager) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

func (m *Manager) isClosed() bool {
	m.closeM.Lock()
	defer m.closeM.Unlock()
	return m.closed
}

// Close stops the check-back loop. It does not close the store; pending
// transactions are rebuilt by the next Open.
func (m *Manager) Close() error {
	m.closeM.Lock()
	if m.closed {
		m.closeM.Unlock()
		return nil
	}
	m.closed = true
	m.closeM.Unlock()
	m.cancel()
	m.bg.Wait()
	return nil
}
