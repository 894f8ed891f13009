// Package fleet runs a twinmq fleet on one machine, for the fleet test and
// `make fleet`: an etcd member, two embedded clusters, consumer processes of
// one group in lanes a.x, a and base (each its own OS process, following
// the configuration in etcd and registered in the etcd lane registry), and
// a producer sending lanes a.x, a.y, a, b and none. It kills the a.x
// process with SIGKILL, restarts it, publishes a configuration change, and
// accounts for every message by id across the processes.
package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	etcd "github.com/twinmq/twinmq/contrib/etcd"
	"github.com/twinmq/twinmq/contrib/etcd/internal/etcdtest"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

const (
	topic = "orders"
	group = "billing"
	token = "fleet-forward-token"
	// Key is where the fleet's configuration document lives in etcd.
	Key = "/twinmq/config/billing"
)

// The lanes of the consumer processes, and those the producer sends.
var (
	memberLanes = []string{"a.x", "a", lane.Base}
	sendLanes   = []string{"a.x", "a.y", "a", "b", lane.Base}
)

// Options of a run.
type Options struct {
	// Binary is started for each member, with MemberEnv=1 in its
	// environment (a test binary whose TestMain calls Member).
	Binary string
	// Rate is messages per second per sent lane (default 20).
	Rate int
	// Phase is how long each phase sends (default 1.5 s).
	Phase time.Duration
	// LeaseTTL is lanes.leaseTTL (default 1 s).
	LeaseTTL time.Duration
	// Publish writes a new document to the key, with a compare-and-swap
	// on the revision read before, and returns the new revision; it is
	// how an operator publishes (twinmqctl put). Required.
	Publish func(ctx context.Context, endpoint, key string, doc []byte) (string, error)
	// Logf reports progress (default nothing).
	Logf func(format string, args ...any)
}

// Report is what a run measured.
type Report struct {
	// Sent is the number of acknowledged sends; Handled the number of
	// them handled at least once.
	Sent, Handled int
	// Lost: acknowledged and never handled. HandledTwice: handled more
	// than once. Misrouted: handled in a lane that no live set of the run
	// resolves the message's lane to.
	Lost, HandledTwice, Misrouted int
	// LaneFailover: from the SIGKILL of the a.x process to the first a.x
	// message handled in lane a.
	LaneFailover time.Duration
	// Returned is true when, after the a.x process restarted, every a.x
	// message was handled by it again.
	Returned bool
	// ConfigApply: from the publish to the last process applying it.
	ConfigApply time.Duration
	// AfterChange counts what broke the new configuration after it
	// applied: sends stored on the drained cluster and forwarded
	// deliveries with lane routing switched off (both must be 0).
	DrainedSends, ForwardsAfterKillSwitch int
	// Problems lists what went wrong, in words.
	Problems []string
}

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

type sent struct {
	lane   string
	at     time.Time
	phase  string
	routed bool // lane routing was on when it was sent
}

type handling struct {
	member    string
	lane      string // the handler's lane
	forwarded bool
	at        time.Time
}

type proc struct {
	name, lane string
	cmd        *exec.Cmd
	ready      chan struct{}
	done       chan struct{}
}

type run struct {
	opts     Options
	report   *Report
	endpoint string
	cli      *clientv3.Client
	prod     *producer.Producer
	pw       *config.Watcher

	mu       sync.Mutex
	sent     map[string]sent
	handled  map[string][]handling
	applied  map[string]map[string]time.Time // revision -> process -> when
	procs    map[string]*proc
	routed   bool
	readers  sync.WaitGroup
	sendErrs int
}

// Run runs the fleet once. The error is for a run that could not be
// carried out; what the run measured, problems included, is the Report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Rate <= 0 {
		opts.Rate = 20
	}
	if opts.Phase <= 0 {
		opts.Phase = 1500 * time.Millisecond
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Binary == "" || opts.Publish == nil {
		return nil, errors.New("fleet: Options.Binary and Options.Publish are required")
	}
	dir, err := os.MkdirTemp("", "twinmq-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	srv, err := etcdtest.StartDir(filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	env, err := embedded.Start(ctx, embedded.Options{
		Topics:               []embedded.Topic{{Name: topic, Queues: 4}},
		Dir:                  filepath.Join(dir, "brokers"),
		MinLongPolling:       100 * time.Millisecond,
		MinInvisibleDuration: time.Second,
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Close(context.Background()) }()

	r := &run{
		opts: opts, report: &Report{}, endpoint: srv.Endpoint(),
		sent: map[string]sent{}, handled: map[string][]handling{},
		applied: map[string]map[string]time.Time{}, procs: map[string]*proc{}, routed: true,
	}
	r.cli, err = clientv3.New(etcdtest.ClientConfig(srv.Endpoint()))
	if err != nil {
		return nil, err
	}
	defer r.cli.Close()

	doc := config.Default()
	t := env.TopicConfig(topic)
	for i := range t.Clusters {
		t.Clusters[i].Priority = 0 // both data centres share the traffic by weight
	}
	doc.Topics = map[string]config.Topic{topic: t}
	doc.Consumers = map[string]config.Consumer{group: {Concurrency: 8, MaxAttempts: 16, Mode: config.ModeDirect}}
	doc.Lanes.LeaseTTL = config.Duration(opts.LeaseTTL)
	doc.Lanes.ForwardTimeout = config.Duration(2 * time.Second)
	if _, err := r.publish(ctx, doc); err != nil {
		return nil, err
	}

	defer r.stopAll()
	for _, l := range memberLanes {
		if err := r.start(ctx, l); err != nil {
			return nil, err
		}
	}
	reg, err := etcd.NewRegistry(ctx, r.cli, etcd.Options{})
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	if err := waitLanes(ctx, reg, func(s lane.Snapshot) bool {
		return s.Live("a.x") && s.Live("a") && s.Live(lane.Base)
	}); err != nil {
		return nil, fmt.Errorf("fleet: the members did not all register: %w", err)
	}

	src, err := etcd.NewSource(ctx, r.cli, Key, etcd.Options{})
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if r.pw, err = config.Start(ctx, src, config.Options{}); err != nil {
		return nil, err
	}
	defer r.pw.Close()
	_, unsub := r.pw.Subscribe(func(_, _ *config.Config) { r.apply("producer", r.pw.Revision(), time.Now()) })
	defer unsub()
	if r.prod, err = producer.New(ctx, producer.WithWatcher(r.pw), producer.WithLogger(zap.NewNop())); err != nil {
		return nil, err
	}
	defer func() { _ = r.prod.Close(context.Background()) }()

	if err := r.phases(ctx, reg, doc); err != nil {
		return r.report, err
	}
	r.account()
	return r.report, nil
}

func (r *run) phases(ctx context.Context, reg *etcd.Registry, doc *config.Config) error {
	rep := r.report
	// 1. Every lane alive: each message in the lane the rules give.
	r.opts.Logf("phase 1: all lanes live")
	r.send(ctx, "steady", sendLanes)
	if err := r.drain(ctx, 20*time.Second); err != nil {
		return err
	}
	r.checkExact("steady", lane.Lanes("a.x", "a", lane.Base))

	// 2. SIGKILL of a.x between two bursts (nothing in flight, so that any
	// message handled twice is a routing fault, not a handler cut short),
	// with traffic resuming at once.
	time.Sleep(300 * time.Millisecond) // let the last acks land
	r.opts.Logf("phase 2: SIGKILL a.x")
	killed := time.Now()
	if err := r.kill("a.x"); err != nil {
		return err
	}
	r.send(ctx, "a.x dead", sendLanes)
	if err := r.drain(ctx, 30*time.Second); err != nil {
		return err
	}
	first, ok := r.firstHandled(killed, "a.x", "a")
	if !ok {
		rep.problem("no a.x message reached lane a after the kill")
	} else {
		rep.LaneFailover = first.Sub(killed)
		if limit := r.opts.LeaseTTL + time.Second; rep.LaneFailover > limit {
			rep.problem("a.x moved to a after %v, more than leaseTTL + 1 s = %v", rep.LaneFailover, limit)
		}
	}
	if err := waitLanes(ctx, reg, func(s lane.Snapshot) bool { return !s.Live("a.x") }); err != nil {
		return fmt.Errorf("fleet: the killed member's lease did not expire: %w", err)
	}

	// 3. Restart a.x: its traffic returns to it.
	r.opts.Logf("phase 3: a.x restarts")
	if err := r.start(ctx, "a.x"); err != nil {
		return err
	}
	if err := waitLanes(ctx, reg, func(s lane.Snapshot) bool { return s.Live("a.x") }); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // every member's watch sees it
	r.send(ctx, "a.x back", sendLanes)
	if err := r.drain(ctx, 20*time.Second); err != nil {
		return err
	}
	rep.Returned = r.checkExact("a.x back", lane.Lanes("a.x", "a", lane.Base))

	// 4. Publish a change: cluster-a drained (weight 0), lane routing off.
	r.opts.Logf("phase 4: publish a weight change and the lane kill switch")
	next := doc.Clone()
	t := next.Topics[topic]
	drained := t.Clusters[0].Name
	t.Clusters[0].Weight = 0
	next.Topics[topic] = t
	next.Lanes.Enabled = false
	put := time.Now()
	rev, err := r.publish(ctx, next)
	if err != nil {
		return err
	}
	applied, err := r.waitApplied(ctx, rev, 4)
	if err != nil {
		return err
	}
	rep.ConfigApply = applied.Sub(put)
	r.mu.Lock()
	r.routed = false
	r.mu.Unlock()
	res := r.send(ctx, "changed", sendLanes)
	for _, c := range res {
		if c == drained {
			rep.DrainedSends++
		}
	}
	if err := r.drain(ctx, 20*time.Second); err != nil {
		return err
	}
	r.mu.Lock()
	for id, s := range r.sent {
		if s.phase != "changed" {
			continue
		}
		for _, h := range r.handled[id] {
			if h.forwarded {
				rep.ForwardsAfterKillSwitch++
			}
		}
	}
	r.mu.Unlock()
	if rep.DrainedSends > 0 {
		rep.problem("%d sends went to the drained cluster %s", rep.DrainedSends, drained)
	}
	if rep.ForwardsAfterKillSwitch > 0 {
		rep.problem("%d deliveries forwarded with lane routing switched off", rep.ForwardsAfterKillSwitch)
	}
	return nil
}

// publish writes doc through Options.Publish.
func (r *run) publish(ctx context.Context, doc *config.Config) (string, error) {
	data, err := doc.Marshal()
	if err != nil {
		return "", err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rev, err := r.opts.Publish(pctx, r.endpoint, Key, data)
	if err != nil {
		return "", fmt.Errorf("fleet: publish: %w", err)
	}
	return rev, nil
}

// send sends Options.Rate messages per second per lane for Options.Phase,
// synchronously from one goroutine per lane, and returns the cluster of
// each acknowledged send.
func (r *run) send(ctx context.Context, phase string, lanes []string) []string {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		clusters []string
	)
	interval := time.Second / time.Duration(r.opts.Rate)
	end := time.Now().Add(r.opts.Phase)
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for n := 0; time.Now().Before(end); n++ {
				sctx, cancel := context.WithTimeout(lane.WithLane(ctx, l), 5*time.Second)
				body := fmt.Sprintf("%s/%s/%d", phase, orBase(l), n)
				at := time.Now()
				res, err := r.prod.Send(sctx, &producer.Message{Topic: topic, Body: []byte(body)})
				cancel()
				r.mu.Lock()
				if err != nil {
					r.sendErrs++
				} else {
					r.sent[res.MessageID] = sent{lane: l, at: at, phase: phase, routed: r.routed}
				}
				r.mu.Unlock()
				if err == nil {
					mu.Lock()
					clusters = append(clusters, res.Cluster)
					mu.Unlock()
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	return clusters
}

// drain waits until every acknowledged send was handled.
func (r *run) drain(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		missing := 0
		for id := range r.sent {
			if len(r.handled[id]) == 0 {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			r.opts.Logf("%d messages still unhandled after %v; accounting them as lost", missing, timeout)
			return nil
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// checkExact reports whether every message of phase was handled, only in
// the lane the live set resolves its lane to; each miss is a problem.
func (r *run) checkExact(phase string, live lane.LiveSet) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := true
	for id, s := range r.sent {
		if s.phase != phase {
			continue
		}
		want, _ := lane.Resolve(s.lane, live)
		for _, h := range r.handled[id] {
			if h.lane != want {
				ok = false
				r.report.problem("%s: message %s of lane %q handled in %q, want %q", phase, id, s.lane, h.lane, want)
			}
		}
	}
	return ok
}

// firstHandled is the earliest handling after t of a message of msgLane
// in the handler lane in.
func (r *run) firstHandled(t time.Time, msgLane, in string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for id, s := range r.sent {
		if s.lane != msgLane {
			continue
		}
		for _, h := range r.handled[id] {
			if h.lane == in && h.at.After(t) && (first.IsZero() || h.at.Before(first)) {
				first = h.at
			}
		}
	}
	return first, !first.IsZero()
}

// account fills the totals of the report.
func (r *run) account() {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.report
	// The lanes a message may be handled in: what its lane resolves to
	// with every member live, or with a.x dead (the only change of the
	// run); any lane once routing was switched off.
	allowed := func(l string) []string {
		a, _ := lane.Resolve(l, lane.Lanes("a.x", "a", lane.Base))
		b, _ := lane.Resolve(l, lane.Lanes("a", lane.Base))
		return []string{a, b}
	}
	rep.Sent = len(r.sent)
	for id, s := range r.sent {
		hs := r.handled[id]
		switch {
		case len(hs) == 0:
			rep.Lost++
			rep.problem("message %s (%s, lane %q) acknowledged and never handled", id, s.phase, s.lane)
			continue
		case len(hs) > 1:
			rep.HandledTwice++
			rep.problem("message %s (%s, lane %q) handled %d times", id, s.phase, s.lane, len(hs))
		}
		rep.Handled++
		if !s.routed {
			continue
		}
		for _, h := range hs {
			if !slices.Contains(allowed(s.lane), h.lane) {
				rep.Misrouted++
				rep.problem("message %s of lane %q handled in %q by %s", id, s.lane, h.lane, h.member)
			}
		}
	}
	if r.sendErrs > 0 {
		r.opts.Logf("%d sends failed (not acknowledged, not counted)", r.sendErrs)
	}
}

// start starts the member process of lane l and waits for it to be ready.
func (r *run) start(ctx context.Context, l string) error {
	name := "member-" + orBase(l)
	cmd := exec.Command(r.opts.Binary, "-test.run=^$") //nolint:gosec // G204: the benchmark's own test binary, named by the caller, re-run as a member
	cmd.Env = append(os.Environ(),
		MemberEnv+"=1", envEtcd+"="+r.endpoint, envKey+"="+Key, envLane+"="+l, envName+"="+name,
		envGroup+"="+group, envTopic+"="+topic, envToken+"="+token)
	cmd.Stderr = os.Stderr
	// A member dies with the process that runs the fleet.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p := &proc{name: name, lane: l, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fleet: start %s: %w", name, err)
	}
	r.mu.Lock()
	r.procs[name] = p
	r.mu.Unlock()
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		defer close(p.done)
		r.read(p, bufio.NewScanner(stdout))
		_ = cmd.Wait()
	}()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("fleet: %s exited before it was ready", name)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("fleet: %s not ready within a minute", name)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read parses a member's lines until its stdout closes.
func (r *run) read(p *proc, sc *bufio.Scanner) {
	readyOnce := sync.OnceFunc(func() { close(p.ready) })
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "READY":
			readyOnce()
		case f[0] == "CONFIG" && len(f) == 3:
			r.apply(p.name, f[1], nanos(f[2]))
		case f[0] == "HANDLED" && len(f) == 5:
			r.mu.Lock()
			r.handled[f[1]] = append(r.handled[f[1]], handling{member: p.name, lane: p.lane, forwarded: f[3] == "true", at: nanos(f[4])})
			r.mu.Unlock()
		}
	}
}

func nanos(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Unix(0, n)
}

func (r *run) apply(who, rev string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.applied[rev]
	if m == nil {
		m = map[string]time.Time{}
		r.applied[rev] = m
	}
	m[who] = at
}

// waitApplied waits until n processes applied rev and returns when the
// last one did.
func (r *run) waitApplied(ctx context.Context, rev string, n int) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		m := r.applied[rev]
		var last time.Time
		for _, at := range m {
			if at.After(last) {
				last = at
			}
		}
		got := len(m)
		r.mu.Unlock()
		if got >= n {
			return last, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("fleet: only %d of %d processes applied revision %s", got, n, rev)
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
}

// kill sends SIGKILL to the member of lane l and waits for it to be gone.
func (r *run) kill(l string) error {
	r.mu.Lock()
	p := r.procs["member-"+orBase(l)]
	r.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// stopAll asks every live member to stop (SIGTERM: a clean Close) and
// waits for each, killing one that takes too long.
func (r *run) stopAll() {
	r.mu.Lock()
	procs := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	r.readers.Wait()
}

func waitLanes(ctx context.Context, reg *etcd.Registry, ok func(lane.Snapshot) bool) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ch, err := reg.Watch(wctx, group)
	if err != nil {
		return err
	}
	for s := range ch {
		if ok(s) {
			return nil
		}
	}
	return fmt.Errorf("fleet: waiting for the group's lanes: %w", context.DeadlineExceeded)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
