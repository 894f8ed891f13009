package clientstate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func TestRefusalOf(t *testing.T) {
	now := time.Now()
	r, ok := RefusalOf(&driver.Error{Code: rmqpb.Code_TOPIC_NOT_FOUND, RPC: "QueryRoute", Endpoint: "h:1", Message: "topic x not found"}, now)
	require.True(t, ok)
	assert.Equal(t, Refusal{Code: 40402, CodeName: "TOPIC_NOT_FOUND", Message: "topic x not found", RPC: "QueryRoute", Endpoint: "h:1", Since: now}, r)
	assert.Equal(t, "broker refused QueryRoute to h:1: TOPIC_NOT_FOUND (40402): topic x not found",
		r.Error())

	for _, notRefused := range []error{
		nil,
		fmt.Errorf("x: %w", driver.ErrUnavailable),
		fmt.Errorf("x: %w", driver.ErrTooManyRequests),
		fmt.Errorf("x: %w", context.Canceled),
		fmt.Errorf("x: %w", driver.ErrClosed),
	} {
		_, ok := RefusalOf(notRefused, now)
		assert.False(t, ok, "%v", notRefused)
	}
}

// A lasting refusal is new once; a transport failure in between does not
// end it, a success does.
func TestLink(t *testing.T) {
	var l Link
	assert.Equal(t, Snapshot{}, l.Snapshot())
	refused := &driver.Error{Code: rmqpb.Code_ILLEGAL_POLLING_TIME, RPC: "ReceiveMessage", Message: "too short"}
	t0 := time.Now()
	assert.True(t, l.Failed(refused, t0))
	assert.False(t, l.Failed(refused, t0.Add(time.Second)), "the same refusal again")
	down := fmt.Errorf("x: %w", driver.ErrUnavailable)
	assert.False(t, l.Failed(down, t0.Add(2*time.Second)))
	s := l.Snapshot()
	assert.True(t, s.Failing)
	assert.Same(t, down, s.LastError)
	require.NotNil(t, s.Refusal)
	assert.Equal(t, t0, s.Refusal.Since, "the refusal has lasted since its first sight")

	l.Succeeded()
	s = l.Snapshot()
	assert.False(t, s.Failing)
	assert.Nil(t, s.Refusal)
	assert.Same(t, down, s.LastError, "the last error stays on record")
	assert.True(t, l.Failed(refused, t0.Add(3*time.Second)), "refused again after a success")
}

// The client's own refusals and the watcher's merge by time.
func TestConfigStatus(t *testing.T) {
	in := make(chan config.Version, 1)
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"t": {Clusters: []config.Cluster{{Name: "c", Endpoints: []string{"127.0.0.1:1"}, Topic: "t", Weight: 1}}}}
	in <- config.Version{Config: cfg, Revision: "r1"}
	w, err := config.Start(context.Background(), config.Chan(in), config.Options{})
	require.NoError(t, err)
	defer w.Close()

	var c Config
	c.Applied("r1", time.Now())
	st := c.Status(w)
	assert.Equal(t, "r1", st.Revision)
	assert.Nil(t, st.Rejected)

	c.Refused("r2", errors.New("cannot build a client"), time.Now())
	st = c.Status(w)
	assert.Equal(t, "r1", st.Revision)
	assert.Equal(t, "r2", st.Rejected.Revision)
	assert.True(t, st.Rejected.Latest)

	in <- config.Version{Revision: "r3", Err: errors.New("unreadable")}
	require.Eventually(t, func() bool { return c.Status(w).Rejected.Revision == "r3" }, 5*time.Second, time.Millisecond,
		"the watcher's later refusal is the latest")

	c.Applied("r4", time.Now())
	c.Refused("r5", errors.New("again"), time.Now())
	c.Applied("r6", time.Now())
	st = c.Status(w)
	assert.Equal(t, "r6", st.Revision)
	assert.Equal(t, "r5", st.Rejected.Revision)
	assert.False(t, st.Rejected.Latest)
}
