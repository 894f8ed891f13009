package etcd

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// readTimeout bounds one read of a followed range, so that a read sent
// into a dead connection is retried rather than waited on for ever.
const readTimeout = 5 * time.Second

// follower keeps a key, or every key under a prefix, in step with etcd:
// it reads the range at a revision, then watches from the next one. It
// reads the range again, and watches from there, when the watch cannot
// go on from where it was: after a compaction removed the revisions it
// needed, after the watch broke, and after an outage (the etcd that came
// back may have been restored or rebuilt with older revisions, which a
// watch resuming from a newer one would wait for in silence).
type follower struct {
	cli     *clientv3.Client
	health  *health
	log     *zap.Logger
	key     string
	prefix  bool
	resyncs prometheus.Counter
}

// load receives the whole range at a revision; reset says the store's
// revision went back since the last read (a restored or rebuilt etcd).
// apply receives the events of one watch response and its revision. Both
// return false once ctx ended while they waited to hand their result on.
type (
	loadFunc  func(kvs []*mvccpb.KeyValue, rev int64, reset bool) bool
	applyFunc func(evs []*clientv3.Event, rev int64) bool
)

func (f *follower) opts(rev int64) []clientv3.OpOption {
	var o []clientv3.OpOption
	if f.prefix {
		o = append(o, clientv3.WithPrefix())
	}
	if rev > 0 {
		o = append(o, clientv3.WithRev(rev))
	}
	return o
}

// read reads the range until it succeeds or ctx ends.
func (f *follower) read(ctx context.Context) (*clientv3.GetResponse, bool) {
	for n := 0; ; n++ {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		resp, err := f.cli.Get(rctx, f.key, f.opts(0)...)
		cancel()
		if ctx.Err() != nil {
			return nil, false
		}
		f.health.observe(err)
		if err == nil {
			return resp, true
		}
		f.log.Debug("etcd read failed; retrying", zap.String("key", f.key), zap.Error(err))
		if !sleep(ctx, backoff(n)) {
			return nil, false
		}
	}
}

// run follows until ctx ends.
func (f *follower) run(ctx context.Context, load loadFunc, apply applyFunc) {
	var last int64 // the newest store revision seen
	for first := true; ; first = false {
		if !first {
			f.resyncs.Inc()
		}
		wake := f.health.wake()
		resp, ok := f.read(ctx)
		if !ok {
			return
		}
		rev := resp.Header.Revision
		reset := rev < last
		if reset {
			f.log.Warn("etcd's revision went back (restored or rebuilt); reading everything again",
				zap.String("key", f.key), zap.Int64("was", last), zap.Int64("now", rev))
		}
		last = rev
		if !load(resp.Kvs, rev, reset) {
			return
		}
		if last, ok = f.watch(ctx, last, wake, apply); !ok {
			return
		}
	}
}

// watch follows from rev+1 until the watch must be read again (it returns
// the newest revision seen and true) or ctx ends (false).
func (f *follower) watch(ctx context.Context, rev int64, wake <-chan struct{}, apply applyFunc) (int64, bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := f.cli.Watch(wctx, f.key, f.opts(rev+1)...)
	for {
		select {
		case <-ctx.Done():
			return rev, false
		case <-wake:
			return rev, true
		case resp, ok := <-wch:
			switch {
			case !ok:
				return rev, sleep(ctx, backoff(0))
			case resp.CompactRevision != 0:
				f.log.Info("etcd compacted past the watch; reading again", zap.String("key", f.key),
					zap.Int64("compacted", resp.CompactRevision))
				return rev, true
			case resp.Err() != nil:
				f.health.observe(resp.Err())
				f.log.Debug("etcd watch broke; reading again", zap.String("key", f.key), zap.Error(resp.Err()))
				return rev, sleep(ctx, backoff(0))
			case resp.IsProgressNotify() || resp.Created:
				f.health.up()
				continue
			}
			f.health.up()
			if resp.Header.Revision > rev {
				rev = resp.Header.Revision
			}
			if len(resp.Events) > 0 && !apply(resp.Events, rev) {
				return rev, false
			}
		}
	}
}
