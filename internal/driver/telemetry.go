package driver

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

const (
	maxStackDump  = 4 << 20
	orphanTimeout = time.Minute
)

// telemetry owns the bidirectional Telemetry stream of one endpoint: it
// sends Settings, records the server's merged reply, answers server
// commands and reopens the stream with backoff when it breaks.
//
// Readiness is sticky: once one handshake succeeded, calls to the endpoint
// no longer wait for the stream (the server keeps the client's settings
// keyed by client id). Before the first success, a failed attempt makes
// waiting callers fail at once with the attempt's error, so that a dead
// endpoint costs a caller one connection attempt, not its whole deadline.
type telemetry struct {
	c  *Client
	ep *endpoint

	ready    atomic.Bool
	up       atomic.Bool // the current stream completed its handshake
	settings atomic.Pointer[ServerSettings]

	mu        sync.Mutex
	readyCh   chan struct{} // closed on the first successful handshake
	attemptCh chan struct{} // closed and replaced after each failed attempt
	lastErr   error         // error of the latest attempt, nil once it succeeded

	sendMu sync.Mutex // serializes Send on the current stream
	stream rmqpb.MessagingService_TelemetryClient
}

func newTelemetry(c *Client, ep *endpoint) *telemetry {
	return &telemetry{c: c, ep: ep, readyCh: make(chan struct{}), attemptCh: make(chan struct{})}
}

// awaitReady blocks until the first handshake succeeded, the latest attempt
// failed (its error is returned), or ctx ends.
func (t *telemetry) awaitReady(ctx context.Context, rpc string) error {
	if t.ready.Load() {
		return nil
	}
	t.mu.Lock()
	if err := t.lastErr; err != nil {
		t.mu.Unlock()
		return err
	}
	readyCh, attemptCh := t.readyCh, t.attemptCh
	t.mu.Unlock()
	select {
	case <-readyCh:
		return nil
	case <-attemptCh:
		if t.ready.Load() {
			return nil
		}
		t.mu.Lock()
		err := t.lastErr
		t.mu.Unlock()
		if err == nil {
			err = &Error{RPC: "Telemetry", Endpoint: t.ep.addr, Message: "settings handshake failed", class: ErrUnavailable}
		}
		return err
	case <-ctx.Done():
		return transportError(ctx, ctx.Err(), rpc, t.ep.addr)
	case <-t.c.root.Done():
		return &Error{RPC: rpc, Endpoint: t.ep.addr, class: ErrClosed}
	}
}

func (t *telemetry) markReady(s ServerSettings) {
	t.settings.Store(&s)
	t.up.Store(true)
	t.mu.Lock()
	t.lastErr = nil
	if !t.ready.Load() {
		t.ready.Store(true)
		close(t.readyCh)
	}
	t.mu.Unlock()
}

func (t *telemetry) fail(err error) {
	t.mu.Lock()
	t.lastErr = err
	close(t.attemptCh)
	t.attemptCh = make(chan struct{})
	t.mu.Unlock()
}

// run keeps a Telemetry stream open until ctx ends.
func (t *telemetry) run(ctx context.Context) {
	backoff := t.c.cfg.ReconnectBackoff
	for {
		established, err := t.session(ctx)
		t.up.Store(false)
		if ctx.Err() != nil {
			return
		}
		err = withStatusCode(err)
		t.fail(err)
		t.c.met.telemetryReconnect()
		t.c.log.Warn("telemetry stream broken; reopening",
			zap.String("endpoint", t.ep.addr), zap.Error(err), zap.Duration("backoff", backoff))
		if established {
			backoff = t.c.cfg.ReconnectBackoff
		}
		// Up to 20% jitter so that many clients do not reconnect in step.
		wait := backoff + time.Duration(rand.Int64N(int64(backoff)/5+1))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, max(maxReconnectBackoff, t.c.cfg.ReconnectBackoff))
	}
}

// session opens one stream, sends Settings and serves it until it breaks.
// established reports whether the Settings handshake succeeded.
func (t *telemetry) session(ctx context.Context) (established bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := t.ep.stub.Telemetry(t.c.hdr.outgoing(sctx))
	if err != nil {
		return false, transportError(ctx, err, "Telemetry", t.ep.addr)
	}
	t.sendMu.Lock()
	t.stream = stream
	err = stream.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: t.c.localSettings(t.ep)}})
	t.sendMu.Unlock()
	defer func() {
		t.sendMu.Lock()
		if t.stream == stream {
			t.stream = nil
		}
		t.sendMu.Unlock()
	}()
	if err != nil {
		return false, t.recvError(ctx, stream, err)
	}
	for {
		cmd, err := stream.Recv()
		if err != nil {
			return established, t.recvError(ctx, stream, err)
		}
		ok, cerr := t.handle(ctx, cmd)
		if cerr != nil {
			// A status-only frame (auth failure, missing client id): wake
			// waiting callers now, the server completes the stream next.
			t.fail(cerr)
			if !established {
				return false, cerr
			}
			continue
		}
		if ok {
			established = true
		}
	}
}

// recvError turns a stream failure into an *Error. A Send error hides the
// real cause, which Recv returns.
func (t *telemetry) recvError(ctx context.Context, stream rmqpb.MessagingService_TelemetryClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = rerr
		} else {
			return &Error{RPC: "Telemetry", Endpoint: t.ep.addr, Message: "stream closed by server", class: ErrUnavailable}
		}
	}
	return transportError(ctx, err, "Telemetry", t.ep.addr)
}

// handle processes one server frame. It reports whether the frame was the
// Settings echo, or the error a non-OK status carried.
func (t *telemetry) handle(ctx context.Context, cmd *rmqpb.TelemetryCommand) (bool, error) {
	if st := cmd.Status; st != nil && !statusSucceeded(st) {
		return false, statusError(st, "Telemetry", t.ep.addr)
	}
	switch x := cmd.GetCommand().(type) {
	case *rmqpb.TelemetryCommand_Settings:
		t.markReady(serverSettingsFromPB(x.Settings))
		return true, nil
	case *rmqpb.TelemetryCommand_RecoverOrphanedTransactionCommand:
		t.recoverOrphan(ctx, x.RecoverOrphanedTransactionCommand)
	case *rmqpb.TelemetryCommand_PrintThreadStackTraceCommand:
		t.reply(&rmqpb.TelemetryCommand{
			Status: &rmqpb.Status{Code: rmqpb.Code_OK, Message: "OK"},
			Command: &rmqpb.TelemetryCommand_ThreadStackTrace{ThreadStackTrace: &rmqpb.ThreadStackTrace{
				Nonce:            x.PrintThreadStackTraceCommand.GetNonce(),
				ThreadStackTrace: ptr(goroutineDump()),
			}},
		})
	case *rmqpb.TelemetryCommand_VerifyMessageCommand:
		t.verifyMessage(ctx, x.VerifyMessageCommand)
	case nil:
		// A bare OK status: nothing to do.
	default:
		t.c.log.Debug("ignoring telemetry command", zap.String("endpoint", t.ep.addr))
	}
	return false, nil
}

func (t *telemetry) reply(cmd *rmqpb.TelemetryCommand) {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	if t.stream == nil {
		return
	}
	if err := t.stream.Send(cmd); err != nil {
		t.c.log.Debug("telemetry reply failed", zap.String("endpoint", t.ep.addr), zap.Error(err))
	}
}

// closeSend half-closes the current stream, telling the server this
// client will send nothing more.
func (t *telemetry) closeSend() {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	if t.stream != nil {
		_ = t.stream.CloseSend()
	}
}

func (t *telemetry) resendSettings() {
	t.reply(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: t.c.localSettings(t.ep)}})
}

// recoverOrphan runs the user's resolver off the stream's goroutine and
// answers with EndTransaction (source SOURCE_SERVER_CHECK). When too many
// checks are already running, or no resolver is set, the command is
// dropped: the server asks again later.
func (t *telemetry) recoverOrphan(ctx context.Context, cmd *rmqpb.RecoverOrphanedTransactionCommand) {
	c := t.c
	fn := c.cfg.OnOrphanedTransaction
	if fn == nil {
		c.log.Warn("orphaned transaction check ignored: no OnOrphanedTransaction set",
			zap.String("endpoint", t.ep.addr), zap.String("transaction_id", cmd.GetTransactionId()))
		return
	}
	select {
	case c.orphan <- struct{}{}:
	default:
		c.log.Warn("orphaned transaction check dropped: too many in flight", zap.String("endpoint", t.ep.addr))
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.orphan }()
		octx, cancel := context.WithTimeout(ctx, orphanTimeout)
		defer cancel()
		msg := convertMessage(cmd.GetMessage(), t.ep.addr)
		txID := cmd.GetTransactionId()
		res := fn(octx, t.ep.addr, msg, txID)
		if res == TransactionUnknown {
			return
		}
		err := c.endTransaction(octx, t.ep.addr, msg.Topic, msg.ID, txID, msg.TraceContext, res,
			rmqpb.TransactionSource_SOURCE_SERVER_CHECK)
		if err != nil {
			c.log.Warn("answering orphaned transaction failed", zap.String("endpoint", t.ep.addr),
				zap.String("transaction_id", txID), zap.Error(err))
		}
	}()
}

// goroutineDump returns the stacks of all goroutines, the Go analogue of
// the Java thread dump the server asks for.
func goroutineDump() string {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= maxStackDump {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

func ptr[T any](v T) *T { return &v }
