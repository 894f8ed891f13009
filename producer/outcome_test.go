package producer

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/rmqerr"
)

// Every outcome a sender can get matches an exported value with errors.Is
// (this package's sentinels, rmqerr's classes, the context's errors), and a
// broker's refusal carries its status code in an *rmqerr.Error; the text
// says what happened to the message. A send whose request timed out used
// to match only a class of an internal package.
func TestEverySendOutcomeMatchesAnExportedValue(t *testing.T) {
	type rig struct {
		p      *Producer
		broker *embedded.Broker
		// throttle makes every SendMessage fail as a throttled transport
		// call (gRPC RESOURCE_EXHAUSTED) while set.
		throttle *atomic.Bool
	}
	// The deadlines below are generous (seconds, where the request timeout
	// is 100 ms or 10 s) so that a loaded machine, which may start a
	// request late, still meets each case's precondition: a request sent
	// and unanswered, or several attempts timed out.
	cases := []struct {
		name string
		// doc adjusts the configuration; opts are extra producer options.
		doc  func(*config.Config)
		opts []Option
		// send runs the send whose outcome is checked, after the warm-up.
		send func(t *testing.T, r rig) error
		is   []error // the error matches each of these
		not  []error // and none of these
		code rmqerr.Code
		text string // the error text contains this
	}{
		{
			name: "context cancelled before the send",
			send: func(t *testing.T, r rig) error {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				_, err := r.p.Send(ctx, msg("orders"))
				return err
			},
			is:   []error{context.Canceled},
			not:  []error{ErrNoTarget, ErrTimeout},
			text: `producer: send to topic "orders" not sent: context canceled`,
		},
		{
			name: "deadline while the broker hangs",
			doc:  func(c *config.Config) { c.Timeouts.Request = config.Duration(10 * time.Second) },
			send: func(t *testing.T, r rig) error {
				r.broker.Pause()
				defer r.broker.Resume()
				ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
				defer cancel()
				_, err := r.p.Send(ctx, msg("orders"))
				return err
			},
			is:   []error{context.DeadlineExceeded},
			not:  []error{ErrTimeout},
			text: "may have been stored",
		},
		{
			name: "request timeout",
			doc:  func(c *config.Config) { c.Timeouts.Request = config.Duration(100 * time.Millisecond) },
			send: func(t *testing.T, r rig) error {
				r.broker.Pause()
				defer r.broker.Resume()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err := r.p.Send(ctx, msg("orders"))
				return err
			},
			is:   []error{ErrTimeout, rmqerr.ErrTimeout, ErrNoTarget, context.DeadlineExceeded},
			text: "got no answer within 100ms",
		},
		{
			name: "request timeout, asynchronous",
			doc:  func(c *config.Config) { c.Timeouts.Request = config.Duration(100 * time.Millisecond) },
			send: func(t *testing.T, r rig) error {
				r.broker.Pause()
				defer r.broker.Resume()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				done := make(chan error, 1)
				r.p.SendAsync(ctx, msg("orders"), func(_ *SendResult, err error) { done <- err })
				return <-done
			},
			is: []error{ErrTimeout, ErrNoTarget, context.DeadlineExceeded},
		},
		{
			name: "broker unreachable",
			send: func(t *testing.T, r rig) error {
				require.NoError(t, r.broker.Stop(testCtx(t)))
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				_, err := r.p.Send(ctx, msg("orders"))
				return err
			},
			is: []error{ErrUnavailable, rmqerr.ErrUnavailable, ErrNoTarget, context.DeadlineExceeded},
		},
		{
			name: "throttled",
			send: func(t *testing.T, r rig) error {
				r.throttle.Store(true)
				defer r.throttle.Store(false)
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				_, err := r.p.Send(ctx, msg("orders"))
				return err
			},
			is: []error{ErrThrottled, rmqerr.ErrThrottled, ErrNoTarget, context.DeadlineExceeded},
		},
		{
			name: "broker internal error",
			send: func(t *testing.T, r rig) error {
				r.broker.FailNextInternal(1 << 20)
				defer r.broker.FailNextInternal(0)
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				_, err := r.p.Send(ctx, msg("orders"))
				return err
			},
			is:   []error{rmqerr.ErrInternal, ErrNoTarget, context.DeadlineExceeded},
			code: rmqerr.CodeInternalServerError,
		},
		{
			name: "refused: message type",
			send: func(t *testing.T, r rig) error {
				m := msg("plain")
				m.MessageGroup = "g" // a FIFO message to a topic of normal messages
				_, err := r.p.Send(testCtx(t), m)
				return err
			},
			is:   []error{rmqerr.ErrBadRequest},
			not:  []error{ErrNoTarget, context.DeadlineExceeded},
			code: rmqerr.CodeMessagePropertyConflictWithType,
			text: "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (40014)",
		},
		{
			name: "refused: topic not found",
			doc: func(c *config.Config) {
				tc := c.Topics["orders"]
				tc.Clusters = slices.Clone(tc.Clusters)
				tc.Clusters[0].Topic = "missing"
				c.Topics["missing"] = tc
			},
			send: func(t *testing.T, r rig) error {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				_, err := r.p.Send(ctx, msg("missing"))
				return err
			},
			is:   []error{ErrNoTarget, rmqerr.ErrNotFound, context.DeadlineExceeded},
			code: rmqerr.CodeTopicNotFound,
			text: `producer: send to topic "missing" not sent: no target`,
		},
		{
			name: "buffer full",
			doc: func(c *config.Config) {
				c.Batching.BatchMaxBytes = 16 << 10
				c.Batching.TotalBatchMaxBytes = 64 << 10
			},
			opts: []Option{WithFailFast()},
			send: func(t *testing.T, r rig) error {
				r.broker.Pause()
				defer r.broker.Resume()
				big := &Message{Topic: "orders", Body: make([]byte, 60<<10)}
				r.p.SendAsync(testCtx(t), big, nil)
				_, err := r.p.Send(testCtx(t), &Message{Topic: "orders", Body: make([]byte, 8<<10)})
				return err
			},
			is:   []error{ErrBufferFull},
			text: "not sent",
		},
		{
			name: "closed",
			send: func(t *testing.T, r rig) error {
				require.NoError(t, r.p.Close(testCtx(t)))
				_, err := r.p.Send(testCtx(t), msg("orders"))
				return err
			},
			is: []error{ErrClosed},
		},
		{
			name: "bad input",
			send: func(t *testing.T, r rig) error {
				_, err := r.p.Send(testCtx(t), &Message{Topic: "orders"})
				return err
			},
			is: []error{ErrEmptyBody},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			env, err := embedded.Start(ctx, embedded.Options{
				Clusters: 1, BrokersPerCluster: 1, Dir: t.TempDir(),
				Topics: []embedded.Topic{{Name: "orders", Type: embedded.Mixed}, {Name: "plain", Type: embedded.Normal}},
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = env.Close(context.Background()) })
			doc := config.Default()
			doc.Topics = map[string]config.Topic{"orders": env.TopicConfig("orders"), "plain": env.TopicConfig("plain")}
			doc.Timeouts.Request = config.Duration(time.Second)
			if tc.doc != nil {
				tc.doc(doc)
			}
			r := rig{broker: env.Clusters()[0].Brokers()[0], throttle: new(atomic.Bool)}
			throttle := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
				cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == rmqpb.MessagingService_SendMessage_FullMethodName && r.throttle.Load() {
					return status.Error(codes.ResourceExhausted, "flow control: too many requests")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})
			r.p = newProducer(t, append([]Option{WithConfig(doc), WithDialOptions(throttle)}, tc.opts...)...)
			_, err = r.p.Send(ctx, msg("orders"))
			require.NoError(t, err, "warm-up")

			err = tc.send(t, r)
			require.Error(t, err)
			t.Logf("%v", err)
			for _, want := range tc.is {
				require.ErrorIs(t, err, want)
			}
			for _, unwanted := range tc.not {
				require.NotErrorIs(t, err, unwanted)
			}
			var refusal *rmqerr.Error
			if tc.code != 0 {
				require.ErrorAs(t, err, &refusal)
				require.Equal(t, tc.code, refusal.Code)
				require.NotEmpty(t, refusal.Message)
				require.Equal(t, r.broker.Endpoint(), refusal.Endpoint)
			} else {
				require.False(t, errors.As(err, &refusal), "no refusal in %v", err)
			}
			if tc.text != "" {
				require.ErrorContains(t, err, tc.text)
			}
			require.NotContains(t, err.Error(), "batch:", "no internal package speaks")
			require.NotContains(t, err.Error(), "attempt(s)")
		})
	}
}

func msg(topic string) *Message { return &Message{Topic: topic, Body: []byte("x")} }

// An empty batch sends nothing and succeeds, with an empty result slice;
// on a closed producer it fails with ErrClosed like every send. It used to
// return nil and nil whatever the state.
func TestEmptySendBatch(t *testing.T) {
	p := newProducer(t, WithConfig(noRouteConfig()))
	ctx := testCtx(t)
	for _, msgs := range [][]*Message{nil, {}} {
		res, err := p.SendBatch(ctx, msgs)
		require.NoError(t, err)
		require.NotNil(t, res)
		require.Empty(t, res)
	}
	require.NoError(t, p.Close(ctx))
	res, err := p.SendBatch(ctx, nil)
	require.ErrorIs(t, err, ErrClosed)
	require.Nil(t, res)
}
