package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// health tracks whether etcd answers, as one component (the registry or
// the config source) sees it: an outage starts at the first failed call
// or when the connection fails, and ends at the first success or when the
// connection is ready again. Each outage is logged once when it starts and
// once when it ends, and counted; its end wakes the followers, which read
// their ranges again (a restarted etcd may have lost or changed them).
type health struct {
	what      string
	log       *zap.Logger
	connected prometheus.Gauge
	outages   prometheus.Counter

	mu        sync.Mutex
	down      bool
	since     time.Time
	recovered chan struct{} // closed when the current outage ends
}

func newHealth(what string, log *zap.Logger, connected prometheus.Gauge, outages prometheus.Counter) *health {
	connected.Set(1)
	return &health{what: what, log: log, connected: connected, outages: outages, recovered: make(chan struct{})}
}

// outage reports whether err means etcd did not answer (as opposed to an
// answer that refused, or a caller that gave up).
func outage(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrCompacted) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// observe feeds the outcome of one call.
func (h *health) observe(err error) {
	switch {
	case err == nil:
		h.up()
	case outage(err):
		h.fail(err)
	}
}

func (h *health) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return
	}
	h.down, h.since = true, time.Now()
	h.connected.Set(0)
	h.outages.Inc()
	h.log.Warn("etcd unreachable; serving the last known state until it returns",
		zap.String("component", h.what), zap.Error(err))
}

func (h *health) up() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return
	}
	h.down = false
	h.connected.Set(1)
	close(h.recovered)
	h.recovered = make(chan struct{})
	h.log.Info("etcd reachable again; catching up",
		zap.String("component", h.what), zap.Duration("outage", time.Since(h.since)))
}

// wake returns a channel closed when the current or next outage ends.
func (h *health) wake() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recovered
}

// monitor follows the state of the client's connection until ctx ends:
// a failing connection starts an outage even while nobody calls (a
// consumer that only watches), and a ready one ends it.
func (h *health) monitor(ctx context.Context, conn *grpc.ClientConn) {
	if conn == nil {
		return
	}
	st := conn.GetState()
	for {
		switch st {
		case connectivity.Ready:
			h.up()
		case connectivity.TransientFailure:
			h.fail(errors.New("connection to etcd failed"))
		}
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
		st = conn.GetState()
	}
}

// backoff is the pause before the n-th retry (n from 0) of a read that
// failed: 50 ms doubling to 2 s.
func backoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(n, 6)
	return min(d, 2*time.Second)
}

// sleep waits d or until ctx ends, reporting whether it slept the whole d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
