package consumer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/driver"
)

func nopHandler(context.Context, *Message) error { return nil }

// A healthy consumer's State shows every cluster routed and every broker
// connected and receiving, under the revision it applied.
func TestStateOfAHealthyConsumer(t *testing.T) {
	env := startEnv(t, "orders")
	w, err := config.Start(context.Background(), config.Static(docFor(env, "orders", "billing", config.Consumer{})), config.Options{})
	require.NoError(t, err)
	defer w.Close()
	c := newConsumer(t, "billing", "orders", nopHandler, WithWatcher(w))
	// A broker's session is made by its first receive, which New does not
	// wait for.
	require.Eventually(t, func() bool {
		for _, cs := range c.State().Clusters {
			for _, b := range cs.Brokers {
				if !b.Connected {
					return false
				}
			}
		}
		return true
	}, waitLong, 10*time.Millisecond)
	st := c.State()
	assert.Equal(t, "billing", st.Group)
	assert.Equal(t, "orders", st.Topic)
	assert.Equal(t, w.Revision(), st.Config.Revision)
	assert.NotEmpty(t, st.Config.Revision)
	assert.Nil(t, st.Config.Rejected)
	require.Len(t, st.Clusters, 2)
	for i, cs := range st.Clusters {
		assert.Equal(t, env.Clusters()[i].Name, cs.Name)
		assert.Equal(t, "orders", cs.PhysicalTopic)
		assert.True(t, cs.Routed)
		assert.Nil(t, cs.Refused)
		require.Len(t, cs.Brokers, 2)
		for _, b := range cs.Brokers {
			assert.True(t, b.Connected, "%s %s", cs.Name, b.Endpoint)
			assert.True(t, b.Receiving, "%s %s", cs.Name, b.Endpoint)
			assert.Nil(t, b.Refused)
			assert.Contains(t, env.Clusters()[i].Endpoints(), b.Endpoint)
			assert.NotEmpty(t, b.Name)
		}
	}
}

// A group every broker refuses fails New at once, with RocketMQ's code:
// before, the consumer started "fine" and received nothing.
func TestNewFailsWhenEveryClusterRefusesTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Dir: t.TempDir(), StrictGroups: true, Groups: []embedded.Group{{Name: "billing"}},
		Topics:               []embedded.Topic{{Name: "orders", Queues: 2}},
		MinInvisibleDuration: 100 * time.Millisecond, MinLongPolling: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	defer func() { _ = env.Close(context.Background()) }()

	doc := docFor(env, "orders", "billling", config.Consumer{})
	_, err = New(ctx, "billling", "orders", nopHandler, WithConfig(doc), WithLongPolling(testPolling))
	require.ErrorIs(t, err, ErrRefused)
	var r *Refusal
	require.ErrorAs(t, err, &r)
	assert.Equal(t, "CONSUMER_GROUP_NOT_FOUND", r.CodeName)
	assert.Equal(t, int32(40403), r.Code)
	assert.Contains(t, r.Message, "billling")
	assert.Contains(t, err.Error(), env.Clusters()[0].Name)
	assert.Contains(t, err.Error(), env.Clusters()[1].Name)

	// The group the brokers know starts.
	c, err := New(ctx, "billing", "orders", nopHandler, WithConfig(docFor(env, "orders", "billing", config.Consumer{})),
		WithLongPolling(testPolling))
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
}

// Receives every broker refuses (settings below its floors) cannot fail
// New, which does not wait for a receive; State reports them at once.
func TestStateReportsRefusedReceives(t *testing.T) {
	env := startEnv(t, "orders")
	c := newConsumer(t, "billing", "orders", nopHandler, WithConfig(docFor(env, "orders", "billing", config.Consumer{})),
		WithInvisibleDuration(20*time.Millisecond)) // below the brokers' 100 ms floor
	require.Eventually(t, func() bool {
		for _, cs := range c.State().Clusters {
			for _, b := range cs.Brokers {
				if b.Refused == nil {
					return false
				}
			}
		}
		return true
	}, waitLong, 10*time.Millisecond)
	for _, cs := range c.State().Clusters {
		assert.True(t, cs.Routed)
		for _, b := range cs.Brokers {
			assert.False(t, b.Receiving)
			assert.True(t, b.Connected)
			assert.Equal(t, "ILLEGAL_INVISIBLE_TIME", b.Refused.CodeName)
			assert.Equal(t, "ReceiveMessage", b.Refused.RPC)
			assert.Equal(t, b.Endpoint, b.Refused.Endpoint)
			assert.Error(t, b.LastError)
			assert.False(t, b.Refused.Since.IsZero())
		}
	}
}

// The revision in force and the latest refused version, whether the
// watcher refused it (invalid) or the consumer (it could not apply it),
// show in State.
func TestStateShowsAppliedAndRejectedConfig(t *testing.T) {
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: fakeDoc(config.Consumer{}), Revision: "r1"}
	c := newFakeConsumer(t, newFakeBroker(), nopHandler, WithSource(config.Chan(versions)))
	st := c.State().Config
	assert.Equal(t, "r1", st.Revision)
	assert.Nil(t, st.Rejected)

	invalid := fakeDoc(config.Consumer{})
	invalid.Timeouts.Request = 0
	versions <- config.Version{Config: invalid, Revision: "r2"}
	require.Eventually(t, func() bool { return c.State().Config.Rejected != nil }, waitLong, time.Millisecond)
	st = c.State().Config
	assert.Equal(t, "r1", st.Revision)
	assert.Equal(t, "r2", st.Rejected.Revision)
	assert.ErrorIs(t, st.Rejected.Err, config.ErrInvalidConfig)
	assert.True(t, st.Rejected.Latest)

	// Valid, but without this consumer's topic: the consumer refuses it.
	other := fakeDoc(config.Consumer{})
	other.Topics = map[string]config.Topic{"elsewhere": other.Topics["t"]}
	versions <- config.Version{Config: other, Revision: "r3"}
	require.Eventually(t, func() bool { return c.State().Config.Rejected.Revision == "r3" }, waitLong, time.Millisecond)
	st = c.State().Config
	assert.Equal(t, "r1", st.Revision, "the consumer still serves r1")
	assert.ErrorIs(t, st.Rejected.Err, ErrUnknownTopic)
	assert.True(t, st.Rejected.Latest)

	versions <- config.Version{Config: fakeDoc(config.Consumer{Concurrency: 2}), Revision: "r4"}
	require.Eventually(t, func() bool { return c.State().Config.Revision == "r4" }, waitLong, time.Millisecond)
	st = c.State().Config
	assert.Equal(t, "r3", st.Rejected.Revision, "the latest refusal stays on record")
	assert.False(t, st.Rejected.Latest)
}

// A group the configuration does not list runs on the defaults, and New
// says so once at Warn.
func TestUnlistedGroupWarnedOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	doc := fakeDoc(config.Consumer{})
	doc.Consumers = nil
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: doc, Revision: "r1"}
	c := newFakeConsumer(t, newFakeBroker(), nopHandler, WithSource(config.Chan(versions)), WithLogger(zap.New(core)))
	const line = "the configuration has no consumers entry for this group; it runs on the defaults"
	require.Equal(t, 1, logs.FilterMessage(line).Len())
	assert.Equal(t, config.DefaultConcurrency, c.live.Load().concurrency)

	doc2 := fakeDoc(config.Consumer{})
	doc2.Consumers = nil
	doc2.Batching.MaxDelay = config.Duration(7 * time.Millisecond)
	versions <- config.Version{Config: doc2, Revision: "r2"}
	require.Eventually(t, func() bool { return c.State().Config.Revision == "r2" }, waitLong, time.Millisecond)
	assert.Equal(t, 1, logs.FilterMessage(line).Len(), "said once, at New")

	listed := fakeDoc(config.Consumer{})
	core2, logs2 := observer.New(zap.WarnLevel)
	newFakeConsumer(t, newFakeBroker(), nopHandler, WithConfig(listed), WithLogger(zap.New(core2)))
	assert.Zero(t, logs2.FilterMessage(line).Len())
}

// A broker's request to verify a message runs it through the handler
// here and reports the handler's outcome; nothing is settled.
func TestVerifyRunsTheHandler(t *testing.T) {
	f := newFakeBroker()
	var dc driver.Config
	ran := make(chan *Message, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, "g", "t", func(ctx context.Context, m *Message) error {
		ran <- m
		if m.ID == "bad" {
			return errors.New("cannot handle")
		}
		return nil
	}, WithConfig(fakeDoc(config.Consumer{})), WithInvisibleDuration(testInvisible), func(o *options) {
		o.newClient = func(c driver.Config) (brokerClient, error) { dc = c; return f, nil }
	})
	require.NoError(t, err)
	defer func() { _ = c.Close(ctx) }()
	require.NotNil(t, dc.OnVerifyMessage, "the consumer's clients answer verification requests")
	require.NoError(t, dc.OnVerifyMessage(ctx, fakeEndpoint, msg("good")))
	require.Error(t, dc.OnVerifyMessage(ctx, fakeEndpoint, msg("bad")))
	m := <-ran
	assert.Equal(t, "good", m.ID)
	assert.Equal(t, "t", m.Topic)
	assert.Equal(t, "fake", m.Cluster)
	assert.Equal(t, "bad", (<-ran).ID)
	assert.Zero(t, f.settled(), "a verified message is not this consumer's delivery: nothing is settled")
}
