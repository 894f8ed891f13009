package dial

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// runnerSpec is what a runner probes: one cluster of one logic topic.
type runnerSpec struct {
	topic, cluster, physical string
	// group is the dial's consumer group here (its shadow group in shadow
	// mode); shadow marks the probes.
	group          string
	shadow         bool
	endpoints      []string
	tls            bool
	cred           *driver.Credentials
	requestTimeout time.Duration
}

// key changes whenever anything the runner was built from changes, so a
// reload that edits a cluster replaces its runner.
func (s runnerSpec) key() string {
	cred := ""
	if s.cred != nil {
		cred = s.cred.AccessKey + ":" + s.cred.SecretKey
	}
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%t\x00%s\x00%v\x00%s\x00%t",
		s.topic, s.cluster, s.physical, strings.Join(s.endpoints, ","), s.tls, cred, s.requestTimeout, s.group, s.shadow)
}

// runner probes the brokers of one cluster of one logic topic: a route
// loop, and per broker a sender and a receiver. Close waits for them all.
type runner struct {
	d        *Dialer
	spec     runnerSpec
	prod     *driver.Client
	cons     *driver.Client
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	probing  map[Broker]bool
	closeOne sync.Once
	closeErr error
}

func (d *Dialer) newRunner(s runnerSpec) (*runner, error) {
	base := driver.Config{
		RequestTimeout: s.requestTimeout, Credentials: s.cred, Logger: d.log,
		LongPollingTimeout: d.opts.LongPolling,
	}
	if s.tls {
		if d.opts.TLS != nil {
			base.TLS = d.opts.TLS.Clone()
		} else {
			base.TLS = defaultTLS()
		}
	}
	pc := base
	pc.Type, pc.Topics = driver.Producer, []string{s.physical}
	// A half message whose commit was lost is rolled back on check-back:
	// it already counted as a send error.
	pc.OnOrphanedTransaction = func(context.Context, string, *driver.ReceivedMessage, string) driver.TransactionResolution {
		return driver.TransactionRollback
	}
	prod, err := driver.New(pc)
	if err != nil {
		return nil, err
	}
	cc := base
	cc.Type, cc.Group = driver.SimpleConsumer, s.group
	cc.Subscriptions = []driver.Subscription{{Topic: s.physical, Filter: driver.Filter{Type: driver.FilterTag, Expression: Tag}}}
	cons, err := driver.New(cc)
	if err != nil {
		_ = prod.Close(context.Background())
		return nil, err
	}
	r := &runner{d: d, spec: s, prod: prod, cons: cons, probing: map[Broker]bool{}}
	r.ctx, r.cancel = context.WithCancel(d.ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.routeLoop()
	}()
	return r, nil
}

func (r *runner) close(ctx context.Context) error {
	r.closeOne.Do(func() {
		r.cancel()
		r.wg.Wait()
		r.closeErr = errors.Join(r.prod.Close(ctx), r.cons.Close(ctx))
	})
	return r.closeErr
}

func (r *runner) routeLoop() {
	t := time.NewTicker(r.d.opts.RouteInterval)
	defer t.Stop()
	for {
		r.discover()
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// discover reads the route through the first access point that answers and
// starts probing the brokers not probed yet. A broker that left the route
// keeps being probed: its probes still count, and a broker gone is what a
// dial test is for.
func (r *runner) discover() {
	var lastErr error
	for _, ap := range r.spec.endpoints {
		route, err := r.prod.QueryRoute(r.ctx, ap, r.spec.physical)
		if err != nil {
			lastErr = err
			continue
		}
		writable := map[Broker][]driver.Queue{}
		readable := map[Broker]driver.Queue{}
		for _, q := range route.WritableQueues() {
			k := r.brokerKey(q)
			writable[k] = append(writable[k], q)
		}
		for _, q := range route.ReadableQueues() {
			k := r.brokerKey(q)
			if _, ok := readable[k]; !ok {
				readable[k] = q
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for k, qs := range writable {
			if r.probing[k] || r.ctx.Err() != nil {
				continue
			}
			r.probing[k] = true
			b := r.d.broker(k)
			// The sender waits for the receiver's first poll, as a
			// group new to a broker may start at the latest offset.
			polled := make(chan struct{})
			if q, ok := readable[k]; ok {
				r.wg.Add(1)
				go func() {
					defer r.wg.Done()
					r.receive(b, q, polled)
				}()
			} else {
				close(polled)
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.send(b, qs, polled)
			}()
		}
		return
	}
	if lastErr != nil && r.ctx.Err() == nil {
		r.d.log.Warn("no route for a probed cluster", zap.String("topic", r.spec.topic),
			zap.String("cluster", r.spec.cluster), zap.Error(lastErr))
	}
}

func (r *runner) brokerKey(q driver.Queue) Broker {
	return Broker{Topic: r.spec.topic, Cluster: r.spec.cluster, Broker: q.Broker, Endpoint: q.Endpoint}
}

// send sends Rate probes a second to b, one queue after the other and the
// kinds taking turns. A send that hangs holds the next ones back: the probes
// not sent are not counted, the hanging one is lost after a period.
func (r *runner) send(b *brokerState, qs []driver.Queue, polled <-chan struct{}) {
	o := r.d.opts
	// Bounded: a broker that hangs from the start must still be probed.
	first := time.NewTimer(o.LongPolling + r.prod.RequestTimeout())
	select {
	case <-r.ctx.Done():
		first.Stop()
		return
	case <-polled:
	case <-first.C:
	}
	first.Stop()
	interval := time.Duration(float64(time.Second) / o.Rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	body := bytes.Repeat([]byte("d"), o.BodySize)
	for i := 0; ; i++ {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		k := o.Kinds[i%len(o.Kinds)]
		q := qs[i%len(qs)]
		r.probe(b, k, q, body)
	}
}

func (r *runner) probe(b *brokerState, k Kind, q driver.Queue, body []byte) {
	now := time.Now()
	msg := &driver.Message{
		Topic: r.spec.physical, Tag: Tag, ID: r.prod.NewMessageID(), Body: body, QueueID: q.ID,
		Keys: []string{"twinmq-dial"},
	}
	if r.spec.shadow {
		msg.Properties = map[string]string{lane.PropertyShadow: lane.ShadowValue}
	}
	switch k {
	case Delayed:
		msg.DeliveryTime = now.Add(r.d.opts.Delay)
	case Transaction:
		msg.Transactional = true
	}
	r.d.sending(msg.ID, b, k, now)
	res, err := r.prod.Send(r.ctx, q.Endpoint, []*driver.Message{msg})
	switch {
	case err != nil:
	case len(res) != 1:
		err = fmt.Errorf("send: %d results for one probe", len(res))
	case res[0].Err != nil:
		err = res[0].Err
	}
	if err == nil && k == Transaction {
		err = r.prod.EndTransaction(r.ctx, q.Endpoint, r.spec.physical, msg.ID, res[0].TransactionID, driver.TransactionCommit)
	}
	if r.ctx.Err() != nil {
		return // stopping: says nothing of the broker
	}
	due := time.Now()
	if k == Delayed {
		due = msg.DeliveryTime
	}
	r.d.sent(msg.ID, due, err)
}

// receive long-polls b for probes and acks them.
func (r *runner) receive(b *brokerState, q driver.Queue, polled chan<- struct{}) {
	o := r.d.opts
	wait := time.Duration(0)
	for first := true; r.ctx.Err() == nil; first = false {
		msgs, err := r.cons.Receive(r.ctx, driver.ReceiveRequest{
			Queue:              q,
			Filter:             driver.Filter{Type: driver.FilterTag, Expression: Tag},
			BatchSize:          32,
			InvisibleDuration:  o.InvisibleDuration,
			LongPollingTimeout: o.LongPolling,
		})
		if first {
			close(polled)
		}
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			r.d.receiveError(b, fmt.Errorf("receive: %w", err))
			wait = min(max(2*wait, 100*time.Millisecond), 2*time.Second)
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		wait = 0
		now := time.Now()
		acks := make([]driver.AckEntry, 0, len(msgs))
		for _, m := range msgs {
			if m.Err == nil {
				r.d.arrived(m.ID, now)
			}
			acks = append(acks, driver.AckEntry{MessageID: m.ID, ReceiptHandle: m.ReceiptHandle})
		}
		if len(acks) > 0 {
			if _, err := r.cons.Ack(r.ctx, q.Endpoint, msgs[0].Topic, acks); err != nil && r.ctx.Err() == nil {
				r.d.receiveError(b, fmt.Errorf("ack: %w", err))
			}
		}
	}
}

func defaultTLS() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }
