package remoting

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// ErrNoNameServer: a NameServer made with no address.
var ErrNoNameServer = errors.New("remoting: no name server address")

// NameServer looks routes up on a list of name servers. It sticks to the
// one that answered last and moves on to the next when one cannot be
// reached (failover); an answer, even TOPIC_NOT_EXIST, ends the lookup.
type NameServer struct {
	c     *Client
	addrs []string
	cur   atomic.Int32
}

// NewNameServer returns a name server client over c.
func NewNameServer(c *Client, addrs []string) (*NameServer, error) {
	if len(addrs) == 0 {
		return nil, ErrNoNameServer
	}
	return &NameServer{c: c, addrs: append([]string(nil), addrs...)}, nil
}

// Route returns the topic's route. A topic the name servers do not know is
// an error wrapping rmqerr.ErrNotFound (rmqerr.CodeTopicNotFound).
func (n *NameServer) Route(ctx context.Context, topic string) (*Route, error) {
	start := int(n.cur.Load())
	var errs []error
	for i := range n.addrs {
		idx := (start + i) % len(n.addrs)
		addr := n.addrs[idx]
		resp, err := n.c.Invoke(ctx, addr, &wire.Header{Code: wire.CodeGetRouteInfoByTopic, Ext: map[string]string{"topic": topic}}, nil)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		n.cur.Store(int32(idx))
		if err := CheckResponse(addr, resp); err != nil {
			return nil, fmt.Errorf("route of topic %q: %w", topic, err)
		}
		r, err := ParseRoute(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("route of topic %q from %s: %w", topic, addr, err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("route of topic %q: no name server answered: %w", topic, errors.Join(errs...))
}

// Refresher looks the routes of a set of topics up periodically and hands
// each result to a callback. Close stops it and waits for its goroutine.
type Refresher struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Refresh starts a Refresher: every interval, for each topic of topics(),
// it calls onRoute with the route or the error (each lookup bounded by
// timeout).
func (n *NameServer) Refresh(interval, timeout time.Duration, topics func() []string, onRoute func(topic string, r *Route, err error)) *Refresher {
	f := &Refresher{done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(f.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-t.C:
			}
			for _, topic := range topics() {
				if f.ctx.Err() != nil {
					return
				}
				ctx, cancel := context.WithTimeout(f.ctx, timeout)
				r, err := n.Route(ctx, topic)
				cancel()
				onRoute(topic, r, err)
			}
		}
	}()
	return f
}

// Close stops the refresher and waits for it.
func (f *Refresher) Close() {
	f.cancel()
	<-f.done
}
