// Command producer is the first thing to run: it starts two embedded
// RocketMQ clusters ("dc1" and "dc2", two brokers each) in this process,
// maps one logic topic onto both with weights 60 and 40, and shows what the
// producer does with the messages it is given:
//
//  1. the three ways to send: Send, SendAsync with a lane in the context,
//     and one explicit SendBatch of a FIFO message group;
//  2. batching: a burst of synchronous sends from 64 goroutines, and how
//     many SendMessage requests carried them (the average batch);
//  3. weights and failover: paced senders for 16 seconds, a line per second
//     with each cluster's share; after 6 seconds both brokers of dc1 stop,
//     and 2 seconds later they start again.
//
// It exits 0 when every message was stored: a stopped cluster must cost
// the senders latency (a retry on the other cluster), not errors.
//
//	go run ./examples/producer            # or: make example
//	go run ./examples/producer -burst 10000 -second 500ms
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

func main() {
	burst := flag.Int("burst", 3200, "messages of the batching burst (part 2)")
	second := flag.Duration("second", time.Second, "length of one line of the part 3 timeline (16 lines)")
	flag.Parse()
	if err := run(*burst, *second); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(burst int, second time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Two clusters ("data centres") of two brokers each, listening on
	// 127.0.0.1, storing under a temporary directory removed on Close.
	env, err := embedded.Start(ctx, embedded.Options{
		ClusterNames: []string{"dc1", "dc2"}, BrokersPerCluster: 2,
		Topics: []embedded.Topic{{Name: "orders", Type: embedded.Mixed}, {Name: "orders_dc2", Type: embedded.Mixed}},
	})
	if err != nil {
		return err
	}
	defer func() { _ = env.Close(context.Background()) }()
	dc1, dc2 := env.Clusters()[0], env.Clusters()[1]
	fmt.Printf("embedded clusters: %s %v, %s %v\n", dc1.Name, dc1.Endpoints(), dc2.Name, dc2.Endpoints())

	// The logic topic "orders" lives on both clusters, under a different
	// physical name on the second. Both have priority 0, so traffic is
	// split by weight (a priority of 1 would make dc2 a standby that takes
	// traffic only as dc1's health drops). In production this document
	// comes from the platform (config.File watches it and the producer
	// reloads live).
	doc := config.Default()
	doc.Topics = map[string]config.Topic{"orders": {Clusters: []config.Cluster{
		{Name: dc1.Name, Endpoints: dc1.Endpoints(), Topic: "orders", Weight: 60},
		{Name: dc2.Name, Endpoints: dc2.Endpoints(), Topic: "orders_dc2", Weight: 40},
	}}}

	// The registry is only for this example's report: the number of
	// SendMessage requests comes from the producer's metrics.
	reg := prometheus.NewRegistry()
	p, err := producer.New(ctx, producer.WithConfig(doc), producer.WithRegisterer(reg))
	if err != nil {
		return err
	}
	defer func() { _ = p.Close(context.Background()) }()
	st := &stats{reg: reg}

	fmt.Println("\n1. Three ways to send")
	if err := threeWays(ctx, p, st); err != nil {
		return err
	}
	fmt.Println("\n2. Batching: synchronous Send from 64 goroutines at once")
	if err := batching(ctx, p, st, burst); err != nil {
		return err
	}
	fmt.Printf("\n3. Weights and failover: 8 paced senders (a message every 2 ms each); weights %s 60, %s 40\n", dc1.Name, dc2.Name)
	if err := timeline(ctx, p, st, dc1, dc2, second); err != nil {
		return err
	}

	// Every send above has its result, so nothing is buffered: count the
	// requests now, since a closed producer's clients take their metric
	// series with them. Close tells the brokers goodbye.
	sent, failed, reqs := st.total()
	if err := p.Close(ctx); err != nil {
		return err
	}
	fmt.Printf("\nin all: %d messages stored in %d SendMessage requests (%.1f per request), %d failed\n",
		sent, reqs, float64(sent)/float64(max(reqs, 1)), failed)
	if failed > 0 {
		return fmt.Errorf("%d sends failed, first: %w", failed, st.firstErr)
	}
	return nil
}

// stats counts what the sends returned.
type stats struct {
	reg      *prometheus.Registry
	mu       sync.Mutex
	sent     int
	failed   int
	firstErr error
}

func (s *stats) record(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.firstErr == nil {
			s.firstErr = err
		}
		s.failed++
		return
	}
	s.sent++
}

// requests is the number of SendMessage requests the producer made so far,
// answered or not.
func (s *stats) requests() int {
	mfs, err := s.reg.Gather()
	if err != nil {
		return 0
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "twinmq_driver_rpc_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rpc" && l.GetValue() == "SendMessage" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(n)
}

func (s *stats) total() (sent, failed, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.failed, s.requests()
}

func threeWays(ctx context.Context, p *producer.Producer, st *stats) error {
	// Send: synchronous, returns the message's own id and offset.
	for i := range 3 {
		r, err := p.Send(ctx, &producer.Message{
			Topic: "orders", Tag: "created",
			Keys: []string{fmt.Sprintf("order-%d", i)},
			Body: []byte(fmt.Sprintf(`{"order":%d}`, i)),
		})
		st.record(err)
		if err != nil {
			return err
		}
		fmt.Printf("   Send      %s -> %s %s queue %d offset %d\n", r.MessageID, r.Cluster, r.Endpoint, r.QueueID, r.Offset)
	}

	// SendAsync with a lane: every message sent under this context gets
	// the lane property, so its consumers of lane "gray.v2" (falling back
	// to "gray", then base) handle it.
	laneCtx := lane.WithLane(ctx, "gray.v2")
	var wg sync.WaitGroup
	var lanes sync.Map
	for i := range 100 {
		wg.Add(1)
		p.SendAsync(laneCtx, &producer.Message{
			Topic: "orders", Tag: "paid",
			Body: []byte(fmt.Sprintf(`{"order":%d,"paid":true}`, i)),
		}, func(r *producer.SendResult, err error) {
			st.record(err)
			if err == nil {
				lanes.Store(r.Lane, true)
			}
			wg.Done()
		})
	}
	wg.Wait()
	lanes.Range(func(k, _ any) bool {
		fmt.Printf("   SendAsync 100 messages, lane %q\n", k)
		return true
	})

	// One explicit batch with a FIFO message group: its messages stay in
	// order in one queue.
	batch := make([]*producer.Message, 100)
	for i := range batch {
		batch[i] = &producer.Message{
			Topic: "orders", Tag: "shipped", MessageGroup: "customer-42",
			Body: []byte(fmt.Sprintf(`{"step":%d}`, i)),
		}
	}
	results, err := p.SendBatch(ctx, batch)
	for _, r := range results {
		if r != nil {
			st.record(nil)
		}
	}
	if err != nil {
		st.record(err)
		return err
	}
	first, last := results[0], results[len(results)-1]
	fmt.Printf("   SendBatch 100 messages of group customer-42 -> %s queue %d offsets %d..%d\n",
		first.Cluster, first.QueueID, first.Offset, last.Offset)
	return nil
}

func batching(ctx context.Context, p *producer.Producer, st *stats, n int) error {
	reqs0 := st.requests()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	body := make([]byte, 512)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				_, err := p.Send(ctx, &producer.Message{Topic: "orders", Body: body})
				st.record(err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reqs := st.requests() - reqs0
	fmt.Printf("   %d messages of 512 B in %v: %d SendMessage requests, %.1f messages per request on average\n",
		n, elapsed.Round(time.Millisecond), reqs, float64(n)/float64(max(reqs, 1)))
	fmt.Println("   (each caller still got its own result; with batching off it would be one request per message)")
	return nil
}

// sample is one send of the timeline.
type sample struct {
	at       time.Duration
	cluster  string
	attempts int
	latency  time.Duration
	err      error
}

func timeline(ctx context.Context, p *producer.Producer, st *stats, dc1, dc2 *embedded.Cluster, second time.Duration) error {
	const lines, stopAt, restartAt = 16, 6, 8
	var (
		mu      sync.Mutex
		samples []sample
		wg      sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(lines * second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t0 := time.Now()
				r, err := p.Send(ctx, &producer.Message{Topic: "orders", Body: []byte("paced")})
				s := sample{at: t0.Sub(start), latency: time.Since(t0), err: err}
				if err == nil {
					s.cluster, s.attempts = r.Cluster, r.Attempts
				}
				st.record(err)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	// The fault: both brokers of dc1 stop (clients see refused
	// connections), then start again on the same ports and data.
	events := map[int]string{}
	faults := func() error {
		time.Sleep(time.Until(start.Add(stopAt * second)))
		for _, b := range dc1.Brokers() {
			if err := b.Stop(ctx); err != nil {
				return err
			}
		}
		events[stopAt] = fmt.Sprintf("<- both brokers of %s stopped", dc1.Name)
		time.Sleep(time.Until(start.Add(restartAt * second)))
		for _, b := range dc1.Brokers() {
			if err := b.Restart(ctx); err != nil {
				return err
			}
		}
		events[restartAt] = fmt.Sprintf("<- %s started again", dc1.Name)
		return nil
	}
	faultErr := faults()
	wg.Wait()
	if faultErr != nil {
		return faultErr
	}

	fmt.Printf("   %-9s %6s %6s %8s %7s %9s\n", "time", dc1.Name, dc2.Name, "retried", "failed", "slowest")
	var steady [2]int
	for i := range lines {
		from, to := time.Duration(i)*second, time.Duration(i+1)*second
		var n, n1, n2, retried, failed int
		var slowest time.Duration
		for _, s := range samples {
			if s.at < from || s.at >= to {
				continue
			}
			n++
			switch {
			case s.err != nil:
				failed++
			case s.cluster == dc1.Name:
				n1++
			case s.cluster == dc2.Name:
				n2++
			}
			if s.attempts > 1 {
				retried++
			}
			slowest = max(slowest, s.latency)
		}
		if i < stopAt {
			steady[0] += n1
			steady[1] += n2
		}
		fmt.Printf("   %-9s %5.0f%% %5.0f%% %8d %7d %7.1fms %s\n", fmt.Sprintf("%v-%v", from, to),
			pct(n1, n), pct(n2, n), retried, failed, float64(slowest)/float64(time.Millisecond), events[i])
	}
	all := steady[0] + steady[1]
	fmt.Printf("   before the stop: %s %.1f%%, %s %.1f%% of %d messages (weights 60/40).\n",
		dc1.Name, pct(steady[0], all), dc2.Name, pct(steady[1], all), all)
	fmt.Printf("   The producer keeps a pick for 50 ms, so %v holds about %d picks: the shares\n", stopAt*second, int(stopAt*second/(50*time.Millisecond)))
	fmt.Println("   follow the weights within a few points, and closer the longer the run.")
	fmt.Printf("   While %s was down its share went to %s: a send that met a stopped broker\n", dc1.Name, dc2.Name)
	fmt.Println("   was retried on the other cluster (retried), so the stop cost latency, not")
	fmt.Println("   errors. A stopped broker is probed every second; once the client's")
	fmt.Println("   reconnect (backing off up to 5 s) and a probe reach it again, it earns its")
	fmt.Println("   share back in steps of a tenth of its weight.")
	return nil
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}
