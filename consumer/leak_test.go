package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
)

// unwindingRenewBroker is a fakeBroker whose ChangeInvisibleDuration, like
// a call on a real connection, takes a moment to unwind after its context
// ended: it returns only when the test releases it.
type unwindingRenewBroker struct {
	*fakeBroker
	entered  chan struct{}
	once     sync.Once
	release  chan struct{}
	returned atomic.Bool
}

func (f *unwindingRenewBroker) ChangeInvisibleDuration(ctx context.Context, endpoint, topic, handle, id string, d time.Duration) (string, error) {
	f.once.Do(func() { close(f.entered) })
	<-ctx.Done()
	<-f.release
	f.returned.Store(true)
	return "", ctx.Err()
}

// Close must not return while a renewal of the invisible time it started is
// still running: before the fix the renewal goroutines (and the loop that
// starts them) had no owner, and outlived Close when its ctx ended with a
// handler still holding a message.
func TestCloseWaitsForInvisibleTimeRenewals(t *testing.T) {
	f := &unwindingRenewBroker{fakeBroker: newFakeBroker(), entered: make(chan struct{}), release: make(chan struct{})}
	handling := make(chan struct{})
	h := func(ctx context.Context, _ *Message) error {
		close(handling)
		<-ctx.Done() // a handler slower than Close's ctx
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, "g", "t", h, WithConfig(fakeDoc(config.Consumer{})), WithInvisibleDuration(testInvisible), func(o *options) {
		o.newClient = func(driver.Config) (brokerClient, error) { return f, nil }
	})
	require.NoError(t, err)
	f.push(msg("m1"))
	<-handling
	select {
	case <-f.entered: // the tracker is renewing m1's invisible time
	case <-time.After(waitLong):
		t.Fatal("no renewal started while the handler held the message")
	}

	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(200 * time.Millisecond) // long enough for a Close that does not wait to return
		close(f.release)
	}()
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer closeCancel()
	_ = c.Close(closeCtx)
	returned := f.returned.Load()
	<-released
	require.True(t, returned, "Close returned while a renewal it started was still running")
}
