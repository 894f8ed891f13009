package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/broker/txn"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/internal/store"
)

// remotingServer serves RocketMQ's classic remoting protocol beside gRPC,
// from the same store and through the same validation (planSend) and
// storage path (Broker.send) as gRPC's SendMessage. It answers
// SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, HEART_BEAT,
// UNREGISTER_CLIENT and END_TRANSACTION, and sends CHECK_TRANSACTION_STATE
// to a producer of a half message's group that registered by heartbeat on
// a connection still open (else the gRPC check-back is tried); other codes
// get REQUEST_CODE_NOT_SUPPORTED.
//
// Where it differs from a RocketMQ broker: the msgId of a send response is
// the client's own message id (UNIQ_KEY), not an id built from the store
// address and commit log offset; a delay level (DELAY) is refused as
// MESSAGE_ILLEGAL (never a silent level); an arbitrary delivery time
// (TIMER_DELIVER_MS) is honoured as the gRPC path does. Fault injection
// applies to sends (a pause or latency holds them, an injected failure
// answers SERVICE_NOT_AVAILABLE); TLS and access control apply to the gRPC
// port only.
type remotingServer struct {
	b    *Broker
	lis  net.Listener
	addr string

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	closed    bool
	producers map[string]map[string]*remConn // group -> client id -> its connection
	opaque    atomic.Int32
	// version is the MQVersion ordinal the answers carry, which clients
	// read as the broker's version (SetRemotingVersion).
	version atomic.Int32
}

// DefaultRemotingVersion is the version the remoting answers carry by
// default: RocketMQ 5.4.0's MQVersion ordinal, a broker with the timer.
const DefaultRemotingVersion = 493

// SetRemotingVersion makes the remoting answers carry version (an MQVersion
// ordinal) as the broker's version, so that a test can show a client a
// 4.x broker (below 413, RocketMQ 5.0.0's). Only the number changes: the
// broker goes on honouring TIMER_DELIVER_MS, which a real 4.x broker
// ignores (it delivers such a message at once).
func (b *Broker) SetRemotingVersion(version int32) {
	if b.rem != nil {
		b.rem.version.Store(version)
	}
}

// remConn is a client connection. Writes to it are coalesced as the
// remoting client's are: a frame is appended to buf and, unless a write is
// under way, its writer writes buf (its frame and any queued before it) in
// one write, then goes on writing what was queued meanwhile until buf is
// empty; a writer that finds a write under way leaves its frame to it. So
// under load many responses leave in one syscall, and a response alone
// leaves at once.
type remConn struct {
	c net.Conn

	mu      sync.Mutex
	buf     []byte // frames not yet written
	spare   []byte // the buffer last written, reused
	writing bool   // a writer is in its loop
	err     error  // a write failed: nothing more is written
}

// remMaxSpare is the largest write buffer a connection keeps for reuse.
const remMaxSpare = 1 << 20

// write queues a whole frame and writes the queue unless a write is under
// way. A nil error means the frame was written or queued behind a write
// under way.
func (rc *remConn) write(frame []byte) error {
	rc.mu.Lock()
	if rc.err != nil {
		err := rc.err
		rc.mu.Unlock()
		return err
	}
	rc.buf = append(rc.buf, frame...)
	return rc.flushLocked()
}

// errEncode marks a response that could not be encoded (the connection is
// not at fault).
var errEncode = errors.New("remoting: cannot encode a response")

// respond queues the response h with body, encoded straight into the
// queue, and writes the queue unless a write is under way.
func (rc *remConn) respond(h *wire.Header, body []byte, t wire.SerializeType) error {
	rc.mu.Lock()
	if rc.err != nil {
		err := rc.err
		rc.mu.Unlock()
		return err
	}
	n := len(rc.buf)
	buf, err := wire.AppendFrame(rc.buf, h, body, t)
	if err != nil {
		rc.buf = buf[:n]
		rc.mu.Unlock()
		return fmt.Errorf("%w: %w", errEncode, err)
	}
	rc.buf = buf
	return rc.flushLocked()
}

// flushLocked writes the queue until it is empty, unless another writer
// is at it; rc.mu is held on entry and released on return. A failed write
// closes the connection (its read loop then ends it).
func (rc *remConn) flushLocked() error {
	if rc.writing {
		rc.mu.Unlock()
		return nil
	}
	rc.writing = true
	for len(rc.buf) > 0 {
		out := rc.buf
		rc.buf, rc.spare = rc.spare[:0], nil
		rc.mu.Unlock()
		_, err := rc.c.Write(out)
		rc.mu.Lock()
		if cap(out) <= remMaxSpare {
			rc.spare = out[:0]
		}
		if err != nil {
			rc.err, rc.buf, rc.writing = err, nil, false
			rc.mu.Unlock()
			_ = rc.c.Close()
			return err
		}
	}
	rc.writing = false
	rc.mu.Unlock()
	return nil
}

func newRemotingServer(b *Broker, lis net.Listener) *remotingServer {
	s := &remotingServer{b: b, lis: remotingListener(lis, b.cfg.Security.TLS), addr: advertised(lis.Addr()),
		conns: map[net.Conn]struct{}{}, producers: map[string]map[string]*remConn{}}
	s.version.Store(DefaultRemotingVersion)
	return s
}

// RemotingAddr returns the "host:port" of the remoting listener, "" when
// the broker has none or is not started.
func (b *Broker) RemotingAddr() string {
	if b.state.Load() == 0 || b.rem == nil {
		return ""
	}
	return b.rem.addr
}

// serve accepts connections until close; it runs in b.wg.
func (s *remotingServer) serve() {
	defer s.b.wg.Done()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.b.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(&remConn{c: c})
	}
}

// close stops accepting and cuts every connection; requests being served
// finish in b.wg.
func (s *remotingServer) close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	_ = s.lis.Close()
	for c := range conns {
		_ = c.Close()
	}
}

func (s *remotingServer) serveConn(rc *remConn) {
	c := rc.c
	defer s.b.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		for _, m := range s.producers {
			for id, pc := range m {
				if pc == rc {
					delete(m, id)
				}
			}
		}
		s.mu.Unlock()
		_ = c.Close()
	}()
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		host = c.RemoteAddr().String()
	}
	// Requests are served by workers of the connection, so that a send
	// waiting (for a flush, a fault's pause) never holds up the read loop
	// or the requests behind it: a request goes to an idle worker, or to a
	// new one when none is idle. Up to remKeptWorkers of them stay for the
	// next requests (their stacks already grown); the others end after
	// their request, as one goroutine per request did. They all end, and
	// are waited for, with the connection.
	var (
		reqs sync.WaitGroup
		kept atomic.Int32
	)
	jobs := make(chan *wire.Command)
	defer func() {
		close(jobs)
		reqs.Wait()
	}()
	r := bufio.NewReaderSize(c, 32<<10)
	for {
		req, err := wire.ReadFrame(r, s.b.cfg.Limits.MaxBodySize+wire.DefaultMaxFrame)
		if err != nil {
			return
		}
		if req.IsResponse() {
			continue // answers to requests this server does not send yet
		}
		select {
		case jobs <- req:
		default:
			reqs.Add(1)
			go s.worker(rc, host, req, jobs, &reqs, &kept)
		}
	}
}

// remKeptWorkers is how many workers a connection keeps between requests.
const remKeptWorkers = 16

// worker serves req, then, while fewer than remKeptWorkers are kept, the
// connection's next requests until it ends.
func (s *remotingServer) worker(rc *remConn, host string, req *wire.Command, jobs <-chan *wire.Command, reqs *sync.WaitGroup, kept *atomic.Int32) {
	defer reqs.Done()
	s.serveRequest(rc, host, req)
	if kept.Add(1) > remKeptWorkers {
		kept.Add(-1)
		return
	}
	for req := range jobs {
		s.serveRequest(rc, host, req)
	}
}

// serveRequest handles req and writes its response (none for a oneway).
func (s *remotingServer) serveRequest(rc *remConn, host string, req *wire.Command) {
	h, body := s.handle(rc, host, req)
	if req.IsOneway() {
		return
	}
	h.Opaque, h.Flag, h.Language, h.Version = req.Opaque, wire.FlagResponse, wire.LangJava, s.version.Load()
	if err := rc.respond(h, body, req.Serialize); errors.Is(err, errEncode) {
		s.b.log.Warn("remoting: cannot encode a response", zap.Error(err))
	}
}

func remErr(code int32, format string, args ...any) *wire.Header {
	return &wire.Header{Code: code, Remark: fmt.Sprintf(format, args...)}
}

func (s *remotingServer) handle(c *remConn, host string, req *wire.Command) (*wire.Header, []byte) {
	if h := s.authenticate(req); h != nil {
		return h, nil
	}
	switch req.Code {
	case wire.CodeEndTransaction:
		return s.endTransaction(req), nil
	case wire.CodeSendMessage, wire.CodeSendMessageV2, wire.CodeSendBatchMessage:
		if h := s.faults(); h != nil {
			return h, nil
		}
		return s.send(host, req), nil
	case wire.CodeHeartbeat:
		return s.heartbeat(c, req), nil
	case wire.CodeUnregisterClient:
		s.mu.Lock()
		delete(s.producers[req.Ext["producerGroup"]], req.Ext["clientID"])
		s.mu.Unlock()
		return &wire.Header{}, nil
	}
	return remErr(wire.RespRequestCodeNotSupported, "request code %d is not supported by this broker", req.Code), nil
}

func (s *remotingServer) heartbeat(c *remConn, req *wire.Command) *wire.Header {
	var hb struct {
		ClientID        string `json:"clientID"`
		ProducerDataSet []struct {
			GroupName string `json:"groupName"`
		} `json:"producerDataSet"`
	}
	if err := json.Unmarshal(req.Body, &hb); err != nil {
		return remErr(wire.RespSystemError, "heartbeat body: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range hb.ProducerDataSet {
		m := s.producers[p.GroupName]
		if m == nil {
			m = map[string]*remConn{}
			s.producers[p.GroupName] = m
		}
		m[hb.ClientID] = c
	}
	return &wire.Header{}
}

// faults applies the broker's injected faults (Config.Faults) to a send:
// a pause or a latency holds it, an injected failure answers
// SERVICE_NOT_AVAILABLE (or the remoting code of the injected status); nil
// lets the send through.
func (s *remotingServer) faults() *wire.Header {
	fail, code, err := s.b.cfg.Faults.enter(context.Background(), s.b.stop)
	switch {
	case err != nil:
		return remErr(wire.RespServiceNotAvailable, "broker: shutting down")
	case fail && code == rmqpb.Code_CODE_UNSPECIFIED:
		return remErr(wire.RespServiceNotAvailable, "broker: injected failure")
	case fail:
		return remErr(remotingCode(code), "broker: injected failure")
	}
	return nil
}

// sendExt reads a send header's field by its V2 short name or its V1 name.
func sendExt(req *wire.Command, short, long string) string {
	if req.Code == wire.CodeSendMessage {
		return req.Ext[long]
	}
	return req.Ext[short]
}

func (s *remotingServer) send(host string, req *wire.Command) *wire.Header {
	topic := sendExt(req, wire.SendTopic, "topic")
	if _, ok := s.b.topic(topic); !ok {
		return remErr(wire.RespTopicNotExist, "topic[%s] not exist, apply first please!", topic)
	}
	qid := int32(-1)
	if q, err := strconv.ParseInt(sendExt(req, wire.SendQueueID, "queueId"), 10, 32); err == nil {
		qid = int32(q)
	}
	sysFlag, _ := strconv.ParseInt(sendExt(req, wire.SendSysFlag, "sysFlag"), 10, 32)
	born, _ := strconv.ParseInt(sendExt(req, wire.SendBornTimestamp, "bornTimestamp"), 10, 64)
	reconsume, _ := strconv.ParseInt(sendExt(req, wire.SendReconsume, "reconsumeTimes"), 10, 32)
	var msgs []sendMsg
	if req.Code == wire.CodeSendBatchMessage {
		batch, err := wire.DecodeBatch(req.Body)
		if err != nil {
			return remErr(wire.RespMessageIllegal, "batch body: %v", err)
		}
		msgs = make([]sendMsg, 0, len(batch))
		for _, m := range batch {
			sm, h := s.sendMsgOf(topic, qid, int32(sysFlag), born, int32(reconsume), host, m.Properties, m.Body)
			if h != nil {
				return h
			}
			msgs = append(msgs, sm)
		}
	} else {
		sm, h := s.sendMsgOf(topic, qid, int32(sysFlag), born, int32(reconsume), host, sendExt(req, wire.SendProperties, "properties"), req.Body)
		if h != nil {
			return h
		}
		msgs = append(msgs, sm)
	}
	plan, err := planSend(msgs, nil, &s.b.cfg.Limits, time.Now(), host)
	var out sendOutcome
	if err == nil && plan.kind == TypeTransaction {
		// The check-back asks a producer of the group that sent the half
		// message (gRPC producers have none: theirs is the topic).
		if g := sendExt(req, wire.SendProducerGroup, "producerGroup"); g != "" {
			plan.messages[0].Properties[propProducerGroup] = g
		}
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err = s.b.send(ctx, plan)
		cancel()
	}
	if err != nil {
		st := toStatus(err)
		return remErr(remotingCode(st.GetCode()), "%s", st.GetMessage())
	}
	if st := out.status.GetCode(); out.held == nil && st != rmqpb.Code_OK {
		return remErr(remotingCode(st), "%s", out.status.GetMessage())
	}
	ids, first, txID := out.ids, out.first, ""
	qid = plan.messages[0].QueueID
	if out.held != nil {
		e := out.held[0]
		if e.GetStatus().GetCode() != rmqpb.Code_OK {
			return remErr(remotingCode(e.GetStatus().GetCode()), "%s", e.GetStatus().GetMessage())
		}
		ids, first, txID = []string{e.GetMessageId()}, e.GetOffset(), e.GetTransactionId()
		// sendHeld picks the queue of a held message itself: the one the
		// client named when valid (a remoting client always names one).
		if t, ok := s.b.topic(topic); !ok || plan.queueID < 0 || int(plan.queueID) >= t.Queues {
			qid = -1
		} else {
			qid = plan.queueID
		}
	}
	h := &wire.Header{Ext: map[string]string{
		wire.RespMsgID:       strings.Join(ids, ","),
		wire.RespQueueID:     strconv.Itoa(int(qid)),
		wire.RespQueueOffset: strconv.FormatInt(first, 10),
	}}
	if txID != "" {
		h.Ext[wire.RespTxID] = txID
	}
	return h
}

// Resolutions of END_TRANSACTION's commitOrRollback (MessageSysFlag).
const (
	remTxNotType  = 0
	remTxCommit   = 8
	remTxRollback = 12
)

// endTransaction resolves a half message (END_TRANSACTION, oneway from the
// Java client; answered when the client asks for an answer). The
// transaction id is the one the send answered; topic is optional.
func (s *remotingServer) endTransaction(req *wire.Command) *wire.Header {
	txID := req.Ext["transactionId"]
	if strings.TrimSpace(txID) == "" {
		return remErr(wire.RespSystemError, "transaction id is empty")
	}
	r := txn.Unknown
	switch req.Ext["commitOrRollback"] {
	case strconv.Itoa(remTxCommit):
		r = txn.Commit
	case strconv.Itoa(remTxRollback):
		r = txn.Rollback
	case strconv.Itoa(remTxNotType):
	default:
		return remErr(wire.RespSystemError, "commitOrRollback %q is not a resolution", req.Ext["commitOrRollback"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.b.txn.End(ctx, txID, "", req.Ext["topic"], r)
	switch {
	case err == nil, errors.Is(err, txn.ErrResolved):
		return &wire.Header{}
	case errors.Is(err, txn.ErrInvalidTransactionID):
		return remErr(wire.RespSystemError, "%v", err)
	}
	st := toStatus(err)
	s.b.log.Warn("remoting end transaction failed", zap.String("transaction_id", txID), zap.Error(err))
	return remErr(remotingCode(st.GetCode()), "%s", st.GetMessage())
}

// checkBack asks a remoting producer of the half message's producer group
// to resolve it (CHECK_TRANSACTION_STATE, oneway, on the producer's own
// connection, the message in the body in RocketMQ's stored layout). ok is
// false when the group has no remoting producer: the gRPC check-back is
// tried then.
func (s *remotingServer) checkBack(msg *store.StoredMessage, txID string) (ok bool, err error) {
	s.mu.Lock()
	var conns []*remConn
	for _, rc := range s.producers[msg.Properties[propProducerGroup]] {
		conns = append(conns, rc)
	}
	s.mu.Unlock()
	if len(conns) == 0 {
		return false, nil
	}
	props := make(map[string]string, len(msg.Properties)+1)
	for k, v := range msg.Properties {
		props[k] = v
	}
	if msg.Tag != "" {
		props[wire.PropTags] = msg.Tag
	}
	ext := wire.MessageExt{Topic: msg.Topic, QueueID: msg.QueueID, QueueOffset: msg.QueueOffset, CommitLogOff: msg.LogOffset,
		SysFlag: wire.SysTransactionPrepare, BornTimestamp: msg.BornTimestamp, BornHost: net.JoinHostPort(msg.BornHost, "0"),
		StoreTimestamp: msg.StoreTimestamp, StoreHost: s.addr, ReconsumeTimes: msg.ReconsumeTimes, Body: msg.Body, Properties: props}
	body, err := wire.AppendMessageExt(nil, &ext)
	if err != nil {
		return true, err
	}
	h := &wire.Header{Code: wire.CodeCheckTransactionState, Language: wire.LangJava, Opaque: s.opaque.Add(1), Flag: wire.FlagOneway,
		Ext: map[string]string{
			"tranStateTableOffset": strconv.FormatInt(msg.QueueOffset, 10),
			"commitLogOffset":      strconv.FormatInt(msg.LogOffset, 10),
			"msgId":                msg.Properties[propUniqKey],
			"transactionId":        txID,
			"offsetMsgId":          msg.Properties[propUniqKey],
			"topic":                msg.Topic,
			"brokerName":           s.b.Name(),
		}}
	frame, err := wire.AppendFrame(nil, h, body, wire.JSON)
	if err != nil {
		return true, err
	}
	var errs []error
	start := int(s.b.nonce.Add(1) % uint64(len(conns)))
	for i := range conns {
		if err := conns[(start+i)%len(conns)].write(frame); err != nil {
			errs = append(errs, err)
			continue
		}
		return true, nil
	}
	return true, errors.Join(errs...)
}

// sendMsgOf converts one remoting message into what planSend validates.
func (s *remotingServer) sendMsgOf(topic string, qid, sysFlag int32, born int64, reconsume int32, host, props string, body []byte) (sendMsg, *wire.Header) {
	m := sendMsg{topic: topic, queueID: qid, bornHost: host, deliveryAttempt: reconsume, body: body}
	if born > 0 {
		m.born = pbTimeOf(born/1000, int32(born%1000)*1e6, true)
	}
	if sysFlag&wire.SysCompressed != 0 {
		m.bodyEncoding = rmqpb.Encoding_GZIP
	}
	var arr [24]wire.Property
	for _, p := range wire.AppendPropertyPairs(arr[:0], props) {
		k, v := p.Name, p.Value
		switch k {
		case wire.PropTags:
			m.hasTag, m.tag = true, v
		case wire.PropKeys:
			for _, key := range strings.Split(v, " ") {
				if key != "" {
					m.keys = append(m.keys, key)
				}
			}
		case wire.PropUniqKey:
			m.messageID = v
		case wire.PropShardingKey:
			m.group = v
		case wire.PropTraceContext:
			m.traceContext = v
		case wire.PropDeliverMS:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return m, remErr(wire.RespMessageIllegal, "property %s=%q is not a time", k, v)
			}
			m.delivery = pbTimeOf(ms/1000, int32(ms%1000)*1e6, true)
		case wire.PropTranMsg:
			if v == "true" {
				m.messageType = rmqpb.MessageType_TRANSACTION
			}
		case "DELAY":
			return m, remErr(wire.RespMessageIllegal, "delay levels are not supported; set %s, an arbitrary delivery time", wire.PropDeliverMS)
		default:
			if !isReservedKey(k) {
				m.user = append(m.user, userProp{key: k, value: v})
			}
		}
	}
	if m.messageID == "" {
		m.messageID = fmt.Sprintf("%032X", s.b.newNonce())
	}
	return m, nil
}

// remotingCode maps a proxy status code to the remoting response code of
// the same meaning.
func remotingCode(c rmqpb.Code) int32 {
	switch {
	case c == rmqpb.Code_TOPIC_NOT_FOUND:
		return wire.RespTopicNotExist
	case c == rmqpb.Code_TOO_MANY_REQUESTS:
		return wire.RespSystemBusy
	case c == rmqpb.Code_MASTER_PERSISTENCE_TIMEOUT:
		return wire.RespFlushDiskTimeout
	case c == rmqpb.Code_SLAVE_PERSISTENCE_TIMEOUT:
		return wire.RespFlushSlaveTimeout
	case c == rmqpb.Code_HA_NOT_AVAILABLE:
		return wire.RespSlaveNotAvailable
	case c == rmqpb.Code_FORBIDDEN || c == rmqpb.Code_UNAUTHORIZED:
		return wire.RespNoPermission
	case c >= 40000 && c < 50000:
		return wire.RespMessageIllegal
	}
	return wire.RespSystemError
}

// NameServer is an in-process RocketMQ name server for embedded brokers:
// it answers GET_ROUTEINFO_BY_TOPIC from the topics of the brokers it is
// given and their remoting addresses, writing brokerAddrs with fastjson's
// unquoted integer keys as a real name server does, so clients meet the
// same quirk. Other codes get REQUEST_CODE_NOT_SUPPORTED.
type NameServer struct {
	lis  net.Listener
	addr string
	wg   sync.WaitGroup

	brokers func() []*Broker

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// StartNameServer listens on addr ("127.0.0.1:0" when empty) and serves
// the routes of the brokers that brokers returns at the time of each
// lookup (the running ones; a stopped broker is left out anyway).
func StartNameServer(addr string, brokers func() []*Broker) (*NameServer, error) {
	return StartNameServerTLS(addr, brokers, nil)
}

// StartNameServerTLS is StartNameServer serving TLS with cfg (nil:
// plaintext), as the brokers of Security.TLS do.
func StartNameServerTLS(addr string, brokers func() []*Broker, cfg *tls.Config) (*NameServer, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("name server: listen %s: %w", addr, err)
	}
	n := &NameServer{lis: remotingListener(lis, cfg), addr: advertised(lis.Addr()), brokers: brokers, conns: map[net.Conn]struct{}{}}
	n.wg.Add(1)
	go n.serve()
	return n, nil
}

// Addr is the name server's "host:port".
func (n *NameServer) Addr() string { return n.addr }

// Close stops the name server and waits for its goroutines.
func (n *NameServer) Close() error {
	n.mu.Lock()
	n.closed = true
	conns := n.conns
	n.conns = map[net.Conn]struct{}{}
	n.mu.Unlock()
	err := n.lis.Close()
	for c := range conns {
		_ = c.Close()
	}
	n.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (n *NameServer) serve() {
	defer n.wg.Done()
	for {
		c, err := n.lis.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			_ = c.Close()
			return
		}
		n.conns[c] = struct{}{}
		n.wg.Add(1)
		n.mu.Unlock()
		go n.serveConn(c)
	}
}

func (n *NameServer) serveConn(c net.Conn) {
	defer n.wg.Done()
	defer func() {
		n.mu.Lock()
		delete(n.conns, c)
		n.mu.Unlock()
		_ = c.Close()
	}()
	for {
		req, err := wire.ReadFrame(c, wire.DefaultMaxFrame)
		if err != nil {
			return
		}
		if req.IsResponse() || req.IsOneway() {
			continue
		}
		var h *wire.Header
		var body []byte
		if req.Code == wire.CodeGetRouteInfoByTopic {
			h, body = n.route(req.Ext["topic"])
		} else {
			h = remErr(wire.RespRequestCodeNotSupported, "request code %d is not supported by this name server", req.Code)
		}
		h.Opaque, h.Flag, h.Language = req.Opaque, wire.FlagResponse, wire.LangJava
		frame, err := wire.AppendFrame(nil, h, body, req.Serialize)
		if err != nil {
			return
		}
		if _, err := c.Write(frame); err != nil {
			return
		}
	}
}

// route writes TopicRouteData the way fastjson does for the brokers that
// serve remoting and have the topic.
func (n *NameServer) route(topic string) (*wire.Header, []byte) {
	bs := n.brokers()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var brokers, queues []string
	for _, b := range bs {
		addr := b.RemotingAddr()
		if addr == "" || b.state.Load() != 1 {
			continue
		}
		t, ok := b.topic(topic)
		if !ok {
			continue
		}
		brokers = append(brokers, fmt.Sprintf(`{"brokerAddrs":{0:%s},"brokerName":%s,"cluster":%s}`, q(addr), q(b.Name()), q(b.Cluster())))
		queues = append(queues, fmt.Sprintf(`{"brokerName":%s,"perm":6,"readQueueNums":%d,"topicSysFlag":0,"writeQueueNums":%d}`, q(b.Name()), t.Queues, t.Queues))
	}
	if len(brokers) == 0 {
		return remErr(wire.RespTopicNotExist, "No topic route info in name server for the topic: %s", topic), nil
	}
	body := `{"brokerDatas":[` + strings.Join(brokers, ",") + `],"filterServerTable":{},"queueDatas":[` + strings.Join(queues, ",") + `]}`
	return &wire.Header{}, []byte(body)
}
