package etcd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/lane"
)

// Registry is a lane.Registry on etcd. See the package doc for the layout
// of its keys and how it behaves when etcd is away.
type Registry struct {
	cli    *clientv3.Client
	prefix string // "<Options.Prefix>/lanes/"
	log    *zap.Logger
	met    *registryMetrics
	health *health

	ctx    context.Context // ends the watches and the monitor at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

var _ lane.Registry = (*Registry)(nil)

// record is what a key holds: the instance, as JSON. Group and ID repeat
// the key's, so a value copied under another key is caught.
type record struct {
	Group string            `json:"group"`
	ID    string            `json:"id"`
	Lane  string            `json:"lane"`
	Addr  string            `json:"addr"`
	Meta  map[string]string `json:"meta,omitempty"`
}

// NewRegistry returns a registry on cli and checks that etcd answers: it
// fails, wrapping ErrUnavailable and ctx's error, when ctx ends first. The
// registry does not close cli; close the registry first, then the client.
func NewRegistry(ctx context.Context, cli *clientv3.Client, opts Options) (*Registry, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	met, err := newRegistryMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if err := reach(ctx, cli, opts.Prefix); err != nil {
		return nil, err
	}
	r := &Registry{
		cli:    cli,
		prefix: opts.Prefix + "/lanes/",
		log:    opts.Logger,
		met:    met,
		health: newHealth("lane registry", opts.Logger, met.connected, met.outages),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.health.monitor(r.ctx, cli.ActiveConnection())
	}()
	return r, nil
}

// reach makes one read, so that a constructor fails at once on an etcd it
// cannot reach rather than at the first use.
func reach(ctx context.Context, cli *clientv3.Client, key string) error {
	_, err := cli.Get(ctx, key, clientv3.WithCountOnly())
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: no answer from %s: %w", ErrUnavailable, strings.Join(cli.Endpoints(), ","), ctx.Err())
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, strings.Join(cli.Endpoints(), ","), err)
}

// Close stops every watch (their channels close) and waits for the
// registry's goroutines. Leases stay in etcd until released or expired:
// release them before closing to leave at once.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}

func (r *Registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func (r *Registry) groupPrefix(group string) string { return r.prefix + url.PathEscape(group) + "/" }

func (r *Registry) key(in lane.Instance) string {
	return r.groupPrefix(in.Group) + url.PathEscape(in.ID)
}

// ttlSeconds is the lease TTL etcd is asked for: whole seconds, rounded
// up, at least one.
func ttlSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

// callErr wraps the error of an etcd call: the caller's ctx error as is,
// a lost lease as lane.ErrLeaseExpired, anything else as ErrUnavailable.
func (r *Registry) callErr(ctx context.Context, what string, err error) error {
	r.health.observe(err)
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("etcd: %s: %w", what, ctx.Err())
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("etcd: %s: %w", what, lane.ErrLeaseExpired)
	}
	return fmt.Errorf("etcd: %s: %w: %w", what, ErrUnavailable, err)
}

// Register implements lane.Registry. It grants a lease of ttl rounded up
// to whole seconds (etcd may grant more: its smallest lease is one and a
// half election timeouts), puts the instance's key on it, and revokes the
// lease of the registration it replaced, if any, so that the old holder's
// Renew fails with lane.ErrLeaseExpired.
func (r *Registry) Register(ctx context.Context, inst lane.Instance, ttl time.Duration) (lane.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := inst.Validate(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("group %q instance %q: ttl %v must be positive: %w", inst.Group, inst.ID, ttl, lane.ErrInvalidInstance)
	}
	if r.isClosed() {
		return nil, lane.ErrRegistryClosed
	}
	inst.Meta = maps.Clone(inst.Meta)
	val, err := json.Marshal(record{Group: inst.Group, ID: inst.ID, Lane: inst.Lane, Addr: inst.Addr, Meta: inst.Meta})
	if err != nil {
		return nil, fmt.Errorf("etcd: encode instance: %w", err)
	}
	grant, err := r.cli.Grant(ctx, ttlSeconds(ttl))
	if err != nil {
		return nil, r.callErr(ctx, "grant a lease", err)
	}
	put, err := r.cli.Put(ctx, r.key(inst), string(val), clientv3.WithLease(grant.ID), clientv3.WithPrevKV())
	if err != nil {
		// The lease holds nothing; let it go, or let it expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = r.cli.Revoke(rctx, grant.ID)
		cancel()
		return nil, r.callErr(ctx, "put the instance", err)
	}
	r.health.up()
	if prev := put.PrevKv; prev != nil && prev.Lease != 0 && clientv3.LeaseID(prev.Lease) != grant.ID {
		// The key moved to the new lease; revoking the old one deletes
		// nothing, and ends the replaced registration.
		if _, err := r.cli.Revoke(ctx, clientv3.LeaseID(prev.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			r.log.Warn("could not end the lease of a replaced registration; it expires by its TTL",
				zap.String("group", inst.Group), zap.String("id", inst.ID), zap.Error(err))
		}
	}
	r.log.Debug("lane instance registered", zap.String("group", inst.Group), zap.String("lane", inst.Lane),
		zap.String("id", inst.ID), zap.String("addr", inst.Addr), zap.Int64("ttl_s", grant.TTL))
	return &lease{r: r, inst: inst, id: grant.ID, ttl: time.Duration(grant.TTL) * time.Second}, nil
}

// Instances implements lane.Registry.
func (r *Registry) Instances(ctx context.Context, group, ln string) ([]lane.Instance, error) {
	s, err := r.Snapshot(ctx, group)
	if err != nil {
		return nil, err
	}
	return slices.Clone(s.Instances[ln]), nil
}

// Lanes implements lane.Registry.
func (r *Registry) Lanes(ctx context.Context, group string) ([]string, error) {
	s, err := r.Snapshot(ctx, group)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(s.Instances)), nil
}

// Snapshot implements lane.Registry with one linearizable read. Its
// revision is the store's.
func (r *Registry) Snapshot(ctx context.Context, group string) (lane.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return lane.Snapshot{}, err
	}
	if r.isClosed() {
		return lane.Snapshot{}, lane.ErrRegistryClosed
	}
	resp, err := r.cli.Get(ctx, r.groupPrefix(group), clientv3.WithPrefix())
	if err != nil {
		return lane.Snapshot{}, r.callErr(ctx, "read group "+group, err)
	}
	r.health.up()
	m := members{}
	for _, kv := range resp.Kvs {
		m.put(r, group, kv)
	}
	return m.snapshot(group, resp.Header.Revision), nil
}

// Watch implements lane.Registry. The first snapshot comes from a read of
// the group; when etcd cannot be reached the read is retried until it
// answers, ctx ends or the registry closes, and nothing is delivered
// meanwhile. Revisions are the store's, except after etcd came back with
// older ones (restored or rebuilt): they then go on from the last one
// delivered, so that a watch never goes back.
func (r *Registry) Watch(ctx context.Context, group string) (<-chan lane.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, lane.ErrRegistryClosed
	}
	out := make(chan lane.Snapshot, 1)
	wctx, cancel := context.WithCancel(r.ctx)
	stop := context.AfterFunc(ctx, cancel)
	f := &follower{cli: r.cli, health: r.health, log: r.log, key: r.groupPrefix(group), prefix: true, resyncs: r.met.resyncs}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(out)
		defer stop()
		defer cancel()
		w := &groupWatch{r: r, group: group, out: out}
		f.run(wctx, w.load, w.apply)
	}()
	return out, nil
}

// groupWatch is the state of one Watch: the group's members by key and
// the revisions delivered.
type groupWatch struct {
	r       *Registry
	group   string
	out     chan lane.Snapshot
	members members
	offset  int64 // added to store revisions after the store went back
	last    int64 // the revision last delivered
	sent    bool
}

func (w *groupWatch) load(kvs []*mvccpb.KeyValue, rev int64, reset bool) bool {
	if reset {
		w.offset = w.last
	}
	m := members{}
	for _, kv := range kvs {
		m.put(w.r, w.group, kv)
	}
	changed := !w.sent || !maps.EqualFunc(m, w.members, sameInstance)
	w.members = m
	if changed {
		w.publish(rev)
	}
	return true
}

func (w *groupWatch) apply(evs []*clientv3.Event, rev int64) bool {
	for _, ev := range evs {
		switch ev.Type {
		case mvccpb.PUT:
			w.members.put(w.r, w.group, ev.Kv)
		case mvccpb.DELETE:
			delete(w.members, string(ev.Kv.Key))
		}
	}
	w.publish(rev)
	return true
}

// publish hands the current state on, replacing a snapshot the reader has
// not taken yet: every snapshot is whole, so only the newest matters.
func (w *groupWatch) publish(rev int64) {
	pub := rev + w.offset
	if w.sent && pub <= w.last {
		pub = w.last + 1
	}
	w.last, w.sent = pub, true
	s := w.members.snapshot(w.group, pub)
	select {
	case w.out <- s:
	default:
		select {
		case <-w.out:
		default:
		}
		w.out <- s
	}
}

// members are a group's instances by key.
type members map[string]lane.Instance

// put decodes kv into m; a value that cannot be decoded, or that does
// not match its key, is skipped (and an older good value under the same
// key removed), counted and logged, never fatal.
func (m members) put(r *Registry, group string, kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	in, err := decodeInstance(kv.Value)
	if err == nil && r.key(in) != key {
		err = fmt.Errorf("instance %q of group %q does not belong under this key", in.ID, in.Group)
	}
	if err == nil && in.Group != group {
		err = fmt.Errorf("instance of group %q under group %q", in.Group, group)
	}
	if err != nil {
		delete(m, key)
		r.met.undecodable.Inc()
		r.log.Warn("skipping a lane registry key that holds no valid instance", zap.String("key", key),
			zap.Int64("mod_revision", kv.ModRevision), zap.Error(err))
		return
	}
	m[key] = in
}

func decodeInstance(b []byte) (lane.Instance, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var rec record
	if err := dec.Decode(&rec); err != nil {
		return lane.Instance{}, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return lane.Instance{}, errors.New("decode: data after the instance")
	}
	in := lane.Instance{Group: rec.Group, Lane: rec.Lane, ID: rec.ID, Addr: rec.Addr, Meta: rec.Meta}
	if err := in.Validate(); err != nil {
		return lane.Instance{}, err
	}
	return in, nil
}

func sameInstance(a, b lane.Instance) bool {
	return a.Group == b.Group && a.Lane == b.Lane && a.ID == b.ID && a.Addr == b.Addr && maps.Equal(a.Meta, b.Meta)
}

// snapshot builds the immutable snapshot of the members.
func (m members) snapshot(group string, rev int64) lane.Snapshot {
	s := lane.Snapshot{Group: group, Revision: rev, Instances: map[string][]lane.Instance{}}
	for _, in := range m {
		in.Meta = maps.Clone(in.Meta)
		s.Instances[in.Lane] = append(s.Instances[in.Lane], in)
	}
	for _, ins := range s.Instances {
		slices.SortFunc(ins, func(a, b lane.Instance) int { return strings.Compare(a.ID, b.ID) })
	}
	return s
}

// lease is a registration on an etcd lease.
type lease struct {
	r    *Registry
	inst lane.Instance
	id   clientv3.LeaseID
	ttl  time.Duration
}

func (l *lease) Instance() lane.Instance {
	in := l.inst
	in.Meta = maps.Clone(in.Meta)
	return in
}

func (l *lease) TTL() time.Duration { return l.ttl }

// Renew sends one keep-alive. A lease etcd no longer has (expired,
// revoked by a newer registration, or lost with the store) fails with
// lane.ErrLeaseExpired.
func (l *lease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.r.isClosed() {
		return lane.ErrRegistryClosed
	}
	resp, err := l.r.cli.KeepAliveOnce(ctx, l.id)
	if err != nil {
		return l.r.callErr(ctx, fmt.Sprintf("renew the lease of %s/%s", l.inst.Group, l.inst.ID), err)
	}
	l.r.health.up()
	if resp.TTL <= 0 {
		return fmt.Errorf("etcd: renew the lease of %s/%s: %w", l.inst.Group, l.inst.ID, lane.ErrLeaseExpired)
	}
	return nil
}

// Release revokes the lease, which deletes the instance's key unless a
// newer registration took it over.
func (l *lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := l.r.cli.Revoke(ctx, l.id)
	if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		l.r.health.observe(nil)
		return nil
	}
	return l.r.callErr(ctx, fmt.Sprintf("release the lease of %s/%s", l.inst.Group, l.inst.ID), err)
}

type registryMetrics struct {
	connected   prometheus.Gauge
	outages     prometheus.Counter
	resyncs     prometheus.Counter
	undecodable prometheus.Counter
}

func newRegistryMetrics(reg prometheus.Registerer) (*registryMetrics, error) {
	m := &registryMetrics{undecodable: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "twinmq_etcd_registry_undecodable_total",
		Help: "Registry keys skipped because their value is not a valid instance.",
	})}
	m.connected, m.outages, m.resyncs = healthMetrics("registry", "the lane registry", "a whole group")
	if err := registerAll(reg, m.connected, m.outages, m.resyncs, m.undecodable); err != nil {
		return nil, err
	}
	return m, nil
}
