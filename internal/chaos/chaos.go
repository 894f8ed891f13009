// Package chaos runs twinmq's fault campaign: two clusters of two brokers,
// each broker its own OS process (the twinmq-broker command, sync flush),
// each reached through a fault proxy of this package on loopback, under
// the load of synchronous and asynchronous (batched) producers and a
// consumer group of two members, while faults picked at random from a
// seed hit the brokers: kill -9 and a restart on the same data dir,
// SIGSTOP/SIGCONT, a partition of a broker or of a whole cluster, lost
// replies, added latency, cut connections, several at once. At the end
// every fault is healed, the load stops, the consumers drain, and every
// message is accounted for by the sequence number in its body.
//
// Decisions:
//   - The brokers' routes advertise the proxies' addresses (the command's
//     "advertise"), so clients never learn a broker's own address and no
//     fault is bypassed.
//   - A partition is a black hole: connections are accepted and held,
//     nothing passes either way; when it heals the held connections are
//     closed, as the timeouts of a real partition would end them. Bytes in
//     the middle of an HTTP/2 stream cannot be dropped without breaking
//     it, so the proxy never resumes a connection that lost bytes.
//   - "Reply lost" forwards the client's bytes and drops the server's,
//     closing the connection at the first dropped byte: every request in
//     flight on it may have been acted on, its answer never arrives. This
//     is what makes sends fail although stored (counted, allowed).
//   - Every fault lasts a bounded time (Options.MinFault..MaxFault); faults
//     start at random intervals and overlap, and some start together.
//     Process faults take one broker at a time each (a broker is not
//     killed while it is stopped); network faults nest.
//   - The load runs in this process, in goroutines: what a caller sees is
//     measured where it is seen. The first attempt at one message in fifty
//     fails in the handler, so the retry path (nack, backoff, redelivery)
//     is under the faults too.
//   - Traffic on a dead target is measured at the producer's gRPC
//     client: an interceptor (WithDialOptions) sees every SendMessage
//     request as it leaves for an endpoint, first attempts and retries
//     alike, including those gRPC fails at once on a broken connection:
//     each is the producer choosing that broker. For every fault that
//     leaves a broker unable to answer (kill -9 until its restart serves,
//     SIGSTOP until SIGCONT, a partition of it or of its cluster, lost
//     replies) the dead-target time is from the fault's start to the
//     start of the last send request to that broker before the fault
//     healed (0 when none went). Requests already in flight at the fault's
//     start do not count; a request started one millisecond before the
//     heal does. The proxy was not used: it sees bytes, and cannot tell a
//     send from a consumer's long poll or a heartbeat. Nor was the
//     producer's State: its Down flag says what failover believes, not
//     whether requests still go there, and the two differ: failover
//     still hands a down broker to a retry when nothing it has not tried
//     has weight left.
//     A fault that ends before the producer left its broker caps the time
//     at the fault's duration; those are counted (Report.
//     DeadTargetOutlasted), so a maximum equal to the longest fault reads
//     as "did not leave", not as a measured delay.
//
// TestChaosShortCampaign (50 faults) runs with go test; BenchmarkChaos is
// make chaos (CHAOS_FAULTS, default 1000). CHAOS_SEED replays a run's
// choice of faults, CHAOS_KINDS (comma separated) limits the kinds,
// CHAOS_INTERVAL sets the mean time between fault starts.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	"github.com/twinmq/twinmq/producer"
)

const (
	topic = "chaos"
	group = "chaos-group"
)

// Fault kinds.
const (
	Kill9       = "kill9"
	SigStop     = "sigstop"
	Partition   = "partition"         // one broker
	PartitionDC = "partition_cluster" // both brokers of a cluster
	ReplyLost   = "reply_lost"
	Latency     = "latency"
	Cut         = "cut"
)

type kindWeight struct {
	name   string
	weight int // relative frequency
}

var kinds = []kindWeight{{Kill9, 20}, {SigStop, 15}, {Partition, 15}, {PartitionDC, 8}, {ReplyLost, 20}, {Latency, 12}, {Cut, 10}}

// Options of a campaign.
type Options struct {
	// Binary is the twinmq-broker command; empty builds it with go build
	// into the run's temporary directory.
	Binary string
	// Faults is how many faults to inject (default 50).
	Faults int
	// Seed picks the faults; the same seed picks the same ones (what the
	// machine does around them, the timing, differs).
	Seed int64
	// Interval is the mean time between fault starts (default 400ms).
	Interval time.Duration
	// MinFault and MaxFault bound a fault's duration (default 100ms, 2s).
	MinFault, MaxFault time.Duration
	// Kinds limits the faults to these kinds (default: all of them).
	Kinds []string
	// Drain bounds the wait for the consumers at the end (default 60s).
	Drain time.Duration
	// Logf reports progress (default nothing).
	Logf func(format string, args ...any)
	// Logger receives the clients' logs (default none).
	Logger *zap.Logger
}

// Report is what a campaign measured.
type Report struct {
	Seed int64
	// Faults injected, in all and by kind (a "several at once" counts
	// each of its faults); Overlapping is how many started while another
	// was still on.
	Faults      int
	ByKind      map[string]int
	Overlapping int
	// Sends: acknowledged (success returned to the caller) and failed.
	AckedSends, FailedSends int
	SyncSends, AsyncSends   int
	// AckedLost: acknowledged and never consumed (must be 0).
	AckedLost int
	LostSeqs  []uint64 // the first few
	// FailedStored: failed to the caller but consumed anyway.
	FailedStored int
	// Consumed distinct messages; Duplicates: successful handlings beyond
	// the first of the same message. (The first attempt at one message in
	// fifty fails on purpose, to send it through the retry path; that
	// redelivery is not a duplicate.)
	Consumed, Duplicates int
	// MaxCallerWait is the longest a Send, or a SendAsync until its
	// callback, took.
	MaxCallerWait time.Duration
	// DeadTargets is how many times a broker was made unable to answer
	// (kill -9, SIGSTOP, a partition of it or of its cluster, lost
	// replies: one per fault and broker it took). For each, the
	// dead-target time is from the fault's start to the start of the
	// last send request the producer sent to that broker before the fault
	// healed (0 when none). MaxDeadTarget, P50DeadTarget and
	// P99DeadTarget are over all of them. DeadTargetOutlasted counts
	// those where a request still went to the broker in the fault's last
	// 100 ms: the producer had not left it yet, and its time is cut short
	// by the fault's end.
	DeadTargets                                 int
	MaxDeadTarget, P50DeadTarget, P99DeadTarget time.Duration
	DeadTargetOutlasted                         int
	DeadTargetByKind                            map[string]KindDeadTarget
	// Proxies sums what the fault proxies did.
	Proxies ProxyStats
	// Elapsed is the whole run, setup and drain included.
	Elapsed time.Duration
}

// DuplicateRate is duplicates per distinct consumed message.
func (r *Report) DuplicateRate() float64 {
	if r.Consumed == 0 {
		return 0
	}
	return float64(r.Duplicates) / float64(r.Consumed)
}

func (r *Report) String() string {
	return fmt.Sprintf("seed=%d faults=%d %v overlapping=%d acked=%d (sync %d async %d) failed=%d failed_stored=%d consumed=%d acked_lost=%d duplicates=%d (%.4f) max_caller_wait=%v dead_target: %d faults max=%v p50=%v p99=%v outlasted=%d %v proxies=%+v elapsed=%v",
		r.Seed, r.Faults, r.ByKind, r.Overlapping, r.AckedSends, r.SyncSends, r.AsyncSends, r.FailedSends, r.FailedStored,
		r.Consumed, r.AckedLost, r.Duplicates, r.DuplicateRate(), r.MaxCallerWait,
		r.DeadTargets, r.MaxDeadTarget, r.P50DeadTarget, r.P99DeadTarget, r.DeadTargetOutlasted, r.DeadTargetByKind, r.Proxies, r.Elapsed)
}

type broker struct {
	name    string
	cluster int
	proxy   *Proxy
	proc    *proc
	busy    sync.Mutex // one process fault at a time
}

type campaign struct {
	opts    Options
	rng     *rand.Rand
	brokers []*broker

	mu       sync.Mutex
	state    map[uint64]uint8 // 1 acked, 2 failed
	consumed map[uint64]int
	maxWait  time.Duration
	syncN    int
	asyncN   int
	dead     *deadTargets

	active atomic64
}

type atomic64 struct {
	mu sync.Mutex
	n  int
}

func (a *atomic64) add(d int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n += d
	return a.n
}

// Run carries out one campaign. The error is for a campaign that could not
// run; what it measured, loss included, is the Report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	start := time.Now()
	if opts.Faults <= 0 {
		opts.Faults = 50
	}
	if opts.Interval <= 0 {
		opts.Interval = 400 * time.Millisecond
	}
	if opts.MinFault <= 0 {
		opts.MinFault = 100 * time.Millisecond
	}
	if opts.MaxFault < opts.MinFault {
		opts.MaxFault = 2 * time.Second
	}
	if opts.Drain <= 0 {
		opts.Drain = 60 * time.Second
	}
	for _, k := range opts.Kinds {
		if !slices.ContainsFunc(kinds, func(e kindWeight) bool { return e.name == k }) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownKind, k)
		}
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	dir, err := os.MkdirTemp("", "twinmq-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if opts.Binary == "" {
		if opts.Binary, err = buildBroker(ctx, dir); err != nil {
			return nil, err
		}
	}
	c := &campaign{
		opts: opts, rng: rand.New(rand.NewPCG(uint64(opts.Seed), 0x7c4a)),
		state: map[uint64]uint8{}, consumed: map[uint64]int{},
	}
	defer c.shutdown()
	cfg, err := c.setup(ctx, dir)
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, b := range c.brokers {
		eps = append(eps, b.proxy.Addr())
	}
	c.dead = newDeadTargets(eps)
	opts.Logf("chaos: seed %d, %d faults, brokers up", opts.Seed, opts.Faults)

	// Consumers first, so they are there from the first message.
	var members []*consumer.Consumer
	defer func() {
		for _, m := range members {
			cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_ = m.Close(cctx)
			cancel()
		}
	}()
	for i := range 2 {
		m, err := consumer.New(ctx, group, topic, c.handle,
			consumer.WithConfig(cfg), consumer.WithLogger(opts.Logger),
			consumer.WithInstanceName(fmt.Sprintf("chaos-consumer-%d", i)),
			consumer.WithInvisibleDuration(3*time.Second), consumer.WithLongPolling(time.Second))
		if err != nil {
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		members = append(members, m)
	}
	prod, err := producer.New(ctx, producer.WithConfig(cfg), producer.WithLogger(opts.Logger),
		producer.WithInstanceName("chaos-producer"),
		producer.WithDialOptions(grpc.WithChainUnaryInterceptor(c.dead.interceptor)))
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	load := c.startLoad(loadCtx, prod)

	report := &Report{Seed: opts.Seed, ByKind: map[string]int{}}
	c.inject(ctx, report)
	opts.Logf("chaos: faults done and healed after %v; stopping the load", time.Since(start).Round(time.Millisecond))
	stopLoad()
	load.Wait()
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	perr := prod.Close(pctx)
	cancel()
	if perr != nil {
		opts.Logf("chaos: producer close: %v", perr)
	}
	c.drain(ctx)
	c.account(report)
	report.Elapsed = time.Since(start)
	return report, nil
}

// setup starts the proxies and the broker processes, and returns the
// clients' configuration (which names the proxies only).
func (c *campaign) setup(ctx context.Context, dir string) (*config.Config, error) {
	cfg := config.Default()
	cfg.Timeouts.Request = config.Duration(2 * time.Second)
	cfg.Timeouts.SendDeadline = config.Duration(8 * time.Second)
	cfg.Consumers = map[string]config.Consumer{group: {Concurrency: 32, MaxAttempts: 16, Mode: config.ModeDirect}}
	var t config.Topic
	logf, err := os.Create(filepath.Join(dir, "brokers.log"))
	if err != nil {
		return nil, err
	}
	for ci, cname := range []string{"dc1", "dc2"} {
		cf := clusterFile{
			Cluster: cname, DataDir: filepath.Join(dir, cname), Flush: "sync", LogLevel: "error",
			Limits: map[string]any{"minInvisible": "1s", "minLongPolling": "100ms"},
			Topics: []topicFile{{Name: topic, Queues: 4, Type: "NORMAL"}},
			Groups: []groupFile{{Name: group, MaxDeliveryAttempts: 17}},
		}
		var eps []string
		var bs []*broker
		for bi := range 2 {
			listen, err := freePort()
			if err != nil {
				return nil, err
			}
			px, err := NewProxy(listen)
			if err != nil {
				return nil, err
			}
			b := &broker{name: fmt.Sprintf("%s-b%d", cname, bi), cluster: ci, proxy: px}
			c.brokers = append(c.brokers, b)
			bs = append(bs, b)
			cf.Brokers = append(cf.Brokers, brokerFile{Name: b.name, Listen: listen, Advertise: px.Addr()})
			eps = append(eps, px.Addr())
		}
		path := filepath.Join(dir, cname+".json")
		if err := writeJSON(path, cf); err != nil {
			return nil, err
		}
		for i, b := range bs {
			b.proc = &proc{binary: c.opts.Binary, config: path, name: b.name, listen: cf.Brokers[i].Listen, log: logf}
			if err := b.proc.start(ctx); err != nil {
				return nil, err
			}
		}
		t.Clusters = append(t.Clusters, config.Cluster{Name: cname, Endpoints: eps, Topic: topic, Weight: config.DefaultWeight})
	}
	cfg.Topics = map[string]config.Topic{topic: t}
	return cfg, nil
}

func (c *campaign) shutdown() {
	var wg sync.WaitGroup
	for _, b := range c.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.proc != nil {
				b.proc.stop(15 * time.Second)
			}
			b.proxy.Close()
		}()
	}
	wg.Wait()
}

// errHandler is the failure of a handler's first attempt at one message
// in fifty: those messages go through the retry path (nack, backoff,
// redelivery), which the faults hit as well.
var errHandler = errors.New("chaos: first attempt fails")

// handle is the consumers' handler: it counts each sequence number it
// handled with success.
func (c *campaign) handle(_ context.Context, m *consumer.Message) error {
	seq, err := strconv.ParseUint(string(m.Body), 10, 64)
	if err != nil {
		return fmt.Errorf("chaos: body %q: %w", m.Body, err)
	}
	if seq%50 == 0 && m.DeliveryAttempt == 1 {
		return errHandler
	}
	c.mu.Lock()
	c.consumed[seq]++
	c.mu.Unlock()
	return nil
}

func (c *campaign) outcome(seq uint64, ok bool, wait time.Duration, async bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.state[seq] = 1
		if async {
			c.asyncN++
		} else {
			c.syncN++
		}
	} else {
		c.state[seq] = 2
	}
	if wait > c.maxWait {
		c.maxWait = wait
	}
}

// startLoad runs four synchronous senders and two asynchronous ones
// (bursts of 8, batched by the producer) until ctx ends; the returned
// group ends when every send has its outcome.
func (c *campaign) startLoad(ctx context.Context, p *producer.Producer) *sync.WaitGroup {
	var seq struct {
		sync.Mutex
		n uint64
	}
	next := func() uint64 {
		seq.Lock()
		defer seq.Unlock()
		seq.n++
		return seq.n
	}
	msg := func(s uint64) *producer.Message {
		return &producer.Message{Topic: topic, Body: []byte(strconv.FormatUint(s, 10))}
	}
	// Sends are not cancelled when the load stops: each runs to its own
	// outcome, bounded by timeouts.sendDeadline.
	sendCtx := context.WithoutCancel(ctx)
	wg := &sync.WaitGroup{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s := next()
				t0 := time.Now()
				_, err := p.Send(sendCtx, msg(s))
				c.outcome(s, err == nil, time.Since(t0), false)
				sleep(ctx, 5*time.Millisecond)
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for range 8 {
					s := next()
					t0 := time.Now()
					wg.Add(1)
					p.SendAsync(sendCtx, msg(s), func(_ *producer.SendResult, err error) {
						defer wg.Done()
						c.outcome(s, err == nil, time.Since(t0), true)
					})
				}
				sleep(ctx, 25*time.Millisecond)
			}
		}()
	}
	return wg
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// inject runs the faults, then heals everything.
func (c *campaign) inject(ctx context.Context, r *Report) {
	var wg sync.WaitGroup
	total := 0
	for total < c.opts.Faults && ctx.Err() == nil {
		n := 1
		if c.rng.IntN(5) == 0 { // several at once
			n = 2 + c.rng.IntN(2)
		}
		for range n {
			if total >= c.opts.Faults {
				break
			}
			kind := pick(c.rng, c.opts.Kinds)
			first := c.rng.IntN(len(c.brokers))
			d := c.opts.MinFault + time.Duration(c.rng.Int64N(int64(c.opts.MaxFault-c.opts.MinFault)+1))
			lat := time.Duration(20+c.rng.IntN(280)) * time.Millisecond
			b := c.brokers[first]
			if kind == Kill9 || kind == SigStop {
				// A process fault holds its broker's busy lock until it
				// healed (fault releases it): the first broker from the
				// one picked that is not down already.
				b = nil
				for i := range c.brokers {
					if o := c.brokers[(first+i)%len(c.brokers)]; o.busy.TryLock() {
						b = o
						break
					}
				}
				if b == nil {
					continue // every broker is down: this one waits
				}
			}
			total++
			r.Faults++
			r.ByKind[kind]++
			if c.active.add(1) > 1 {
				r.Overlapping++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.active.add(-1)
				c.fault(ctx, kind, b, d, lat)
			}()
		}
		sleep(ctx, time.Duration(c.rng.Int64N(int64(2*c.opts.Interval)+1)))
	}
	wg.Wait()
}

func pick(rng *rand.Rand, only []string) string {
	sum := 0
	for _, k := range kinds {
		if len(only) == 0 || slices.Contains(only, k.name) {
			sum += k.weight
		}
	}
	x := rng.IntN(sum)
	for _, k := range kinds {
		if len(only) > 0 && !slices.Contains(only, k.name) {
			continue
		}
		if x < k.weight {
			return k.name
		}
		x -= k.weight
	}
	return kinds[0].name
}

// fault applies one fault for d and heals it.
func (c *campaign) fault(ctx context.Context, kind string, b *broker, d, lat time.Duration) {
	switch kind {
	case Kill9:
		defer b.busy.Unlock()
		b.proc.kill9()
		defer c.dead.begin(Kill9, b.proxy.Addr())() // until the restart serves
		sleep(ctx, d)
		// The restart is not cut short by ctx: the campaign heals what it
		// broke. A broker that does not come back is a finding, logged.
		for i := range 5 {
			err := b.proc.start(context.WithoutCancel(ctx))
			if err == nil {
				break
			}
			c.opts.Logf("chaos: restart %s (attempt %d): %v", b.name, i+1, err)
			time.Sleep(time.Second)
		}
	case SigStop:
		defer b.busy.Unlock()
		_ = b.proc.signal(syscall.SIGSTOP)
		end := c.dead.begin(SigStop, b.proxy.Addr())
		sleep(ctx, d)
		_ = b.proc.signal(syscall.SIGCONT)
		end()
	case Partition:
		heal := b.proxy.Partition()
		end := c.dead.begin(Partition, b.proxy.Addr())
		sleep(ctx, d)
		heal()
		end()
	case PartitionDC:
		var heals []func()
		var eps []string
		for _, o := range c.brokers {
			if o.cluster == b.cluster {
				heals = append(heals, o.proxy.Partition())
				eps = append(eps, o.proxy.Addr())
			}
		}
		end := c.dead.begin(PartitionDC, eps...)
		sleep(ctx, d)
		for _, h := range heals {
			h()
		}
		end()
	case ReplyLost:
		heal := b.proxy.ReplyLost()
		end := c.dead.begin(ReplyLost, b.proxy.Addr())
		sleep(ctx, d)
		heal()
		end()
	case Latency:
		heal := b.proxy.Delay(lat)
		sleep(ctx, d)
		heal()
	case Cut:
		b.proxy.Cut()
	}
}

// drain waits until every acknowledged message was consumed, or the drain
// timeout, then a little more for late duplicates.
func (c *campaign) drain(ctx context.Context) {
	deadline := time.Now().Add(c.opts.Drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c.mu.Lock()
		missing := 0
		for s, st := range c.state {
			if st == 1 && c.consumed[s] == 0 {
				missing++
			}
		}
		c.mu.Unlock()
		if missing == 0 {
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	sleep(ctx, 2*time.Second)
}

func (c *campaign) account(r *Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, st := range c.state {
		n := c.consumed[s]
		switch st {
		case 1:
			r.AckedSends++
			if n == 0 {
				r.AckedLost++
				r.LostSeqs = append(r.LostSeqs, s)
			}
		case 2:
			r.FailedSends++
			if n > 0 {
				r.FailedStored++
			}
		}
	}
	sort.Slice(r.LostSeqs, func(i, j int) bool { return r.LostSeqs[i] < r.LostSeqs[j] })
	if len(r.LostSeqs) > 20 {
		r.LostSeqs = r.LostSeqs[:20]
	}
	for _, n := range c.consumed {
		r.Consumed++
		r.Duplicates += n - 1
	}
	r.SyncSends, r.AsyncSends = c.syncN, c.asyncN
	for _, b := range c.brokers {
		st := b.proxy.Stats()
		r.Proxies.Conns += st.Conns
		r.Proxies.Held += st.Held
		r.Proxies.DroppedReplies += st.DroppedReplies
	}
	r.MaxCallerWait = c.maxWait
	c.dead.report(r)
}

// ErrUnknownKind is returned by Run for an Options.Kinds entry that is
// not a fault kind of this package.
var ErrUnknownKind = errors.New("chaos: unknown fault kind")

var errLoss = errors.New("chaos: acknowledged messages were lost")

// Check returns an error wrapping errLoss when acknowledged messages were
// lost.
func (r *Report) Check() error {
	if r.AckedLost > 0 {
		return fmt.Errorf("%w: %d of %d (first: %v)", errLoss, r.AckedLost, r.AckedSends, r.LostSeqs)
	}
	return nil
}
