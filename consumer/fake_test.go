package consumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
)

// fakeBroker is a scripted brokerClient for the paths a real broker cannot
// be made to take on demand. Receive hands out the batches pushed with
// push; every settle call is recorded.
type fakeBroker struct {
	settings driver.ServerSettings

	batches chan []*driver.ReceivedMessage

	mu      sync.Mutex
	acks    []string // message ids
	nacks   map[string][]time.Duration
	renews  map[string]int
	dlq     []string
	handles map[string]string // id -> newest handle issued
	seq     int
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{
		batches: make(chan []*driver.ReceivedMessage, 16),
		nacks:   map[string][]time.Duration{},
		renews:  map[string]int{},
		handles: map[string]string{},
	}
}

const fakeEndpoint = "127.0.0.1:1"

func (f *fakeBroker) push(msgs ...*driver.ReceivedMessage) {
	f.mu.Lock()
	for _, m := range msgs {
		f.seq++
		m.ReceiptHandle = fmt.Sprintf("h-%d", f.seq)
		m.Endpoint = fakeEndpoint
		if m.DeliveryAttempt == 0 {
			m.DeliveryAttempt = 1
		}
		f.handles[m.ID] = m.ReceiptHandle
	}
	f.mu.Unlock()
	f.batches <- msgs
}

func (f *fakeBroker) Route(ctx context.Context, accessPoint, topic string) (*driver.Route, error) {
	return &driver.Route{Topic: topic, AccessPoint: accessPoint, Queues: []driver.Queue{{
		Topic: topic, Permission: driver.PermReadWrite, Broker: "fake-broker", Endpoint: fakeEndpoint,
	}}}, nil
}

func (f *fakeBroker) Receive(ctx context.Context, req driver.ReceiveRequest) ([]*driver.ReceivedMessage, error) {
	select {
	case b := <-f.batches:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(50 * time.Millisecond):
		return nil, nil
	}
}

// current checks that a settle call used the newest handle of the message.
func (f *fakeBroker) current(id, handle string) error {
	if f.handles[id] != handle {
		return fmt.Errorf("%w: stale handle %s for %s (newest %s)", driver.ErrBadRequest, handle, id, f.handles[id])
	}
	return nil
}

func (f *fakeBroker) Ack(ctx context.Context, endpoint, topic string, entries []driver.AckEntry) ([]error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := make([]error, len(entries))
	for i, e := range entries {
		if errs[i] = f.current(e.MessageID, e.ReceiptHandle); errs[i] == nil {
			f.acks = append(f.acks, e.MessageID)
		}
	}
	return errs, nil
}

func (f *fakeBroker) ChangeInvisibleDuration(ctx context.Context, endpoint, topic, handle, id string, d time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.current(id, handle); err != nil {
		return "", err
	}
	f.seq++
	nh := fmt.Sprintf("h-%d", f.seq)
	f.handles[id] = nh
	if d < testInvisible/2 {
		f.nacks[id] = append(f.nacks[id], d)
	} else {
		f.renews[id]++
	}
	return nh, nil
}

func (f *fakeBroker) ForwardToDeadLetterQueue(ctx context.Context, endpoint string, d driver.DeadLetter) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.current(d.MessageID, d.ReceiptHandle); err != nil {
		return err
	}
	f.dlq = append(f.dlq, d.MessageID)
	return nil
}

func (f *fakeBroker) ServerSettings(endpoint string) (driver.ServerSettings, bool) {
	return f.settings, true
}

// EndpointState: the fake is always connected.
func (f *fakeBroker) EndpointState(endpoint string) driver.EndpointState {
	return driver.EndpointState{Dialled: true, Connected: true}
}

func (f *fakeBroker) Close(ctx context.Context) error { return nil }

// settled reports how many of the messages were acked, nacked or
// dead-lettered.
func (f *fakeBroker) settled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.acks) + len(f.dlq)
	for _, v := range f.nacks {
		n += len(v)
	}
	return n
}

func (f *fakeBroker) waitSettled(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return f.settled() >= n }, waitLong, 5*time.Millisecond)
}

// fakeDoc is a document with one topic on one (fake) cluster.
func fakeDoc(cs config.Consumer) *config.Config {
	if cs.Concurrency == 0 {
		cs.Concurrency = 4
	}
	if cs.MaxAttempts == 0 {
		cs.MaxAttempts = 5
	}
	cs.Mode = config.ModeDirect
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"t": {Clusters: []config.Cluster{{Name: "fake", Endpoints: []string{fakeEndpoint}, Topic: "t", Weight: 100}}}}
	cfg.Consumers = map[string]config.Consumer{"g": cs}
	return cfg
}

// newFakeConsumer runs a consumer of group "g", topic "t", on f.
func newFakeConsumer(t *testing.T, f *fakeBroker, h Handler, opts ...Option) *Consumer {
	t.Helper()
	base := []Option{WithInvisibleDuration(testInvisible), WithRetryBackoff(func(int) time.Duration { return 10 * time.Millisecond })}
	base = append(base, opts...)
	base = append(base, func(o *options) {
		o.newClient = func(driver.Config) (brokerClient, error) { return f, nil }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, "g", "t", h, base...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func msg(id string) *driver.ReceivedMessage {
	return &driver.ReceivedMessage{ID: id, Topic: "t", Body: []byte(id)}
}
