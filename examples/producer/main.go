// Command producer is the first thing to run: it starts two embedded
// RocketMQ clusters in this process, maps one logic topic onto both, and
// sends a few hundred messages through it, some synchronously, some
// asynchronously with a lane in the context, some as one explicit batch.
// It prints where messages went and a summary, and exits 0 when every
// message was stored.
//
//	go run ./examples/producer            # or: make example
//	go run ./examples/producer -n 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

func main() {
	n := flag.Int("n", 300, "messages to send (a third each: Send, SendAsync with a lane, SendBatch)")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Two clusters ("data centres") of two brokers each, listening on
	// 127.0.0.1, storing under a temporary directory removed on Close.
	env, err := embedded.Start(ctx, embedded.Options{
		Clusters: 2, BrokersPerCluster: 2,
		Topics: []embedded.Topic{{Name: "orders", Type: embedded.Mixed}, {Name: "orders_dc2", Type: embedded.Mixed}},
	})
	if err != nil {
		return err
	}
	defer func() { _ = env.Close(context.Background()) }()
	dc1, dc2 := env.Clusters()[0], env.Clusters()[1]
	fmt.Printf("embedded clusters: %s %v, %s %v\n", dc1.Name, dc1.Endpoints(), dc2.Name, dc2.Endpoints())

	// The logic topic "orders" lives on both clusters, under a different
	// physical name on the second. In production this document comes from
	// the platform (config.File watches it and the producer reloads live).
	doc := config.Default()
	doc.Topics = map[string]config.Topic{"orders": {Clusters: []config.Cluster{
		{Name: dc1.Name, Endpoints: dc1.Endpoints(), Topic: "orders", Weight: 60},
		{Name: dc2.Name, Endpoints: dc2.Endpoints(), Topic: "orders_dc2", Weight: 40},
	}}}

	p, err := producer.New(ctx, producer.WithConfig(doc))
	if err != nil {
		return err
	}

	var (
		mu        sync.Mutex
		byCluster = map[string]int{}
		paced     = map[string]int{} // the paced synchronous sends only
		byLane    = map[string]int{}
		failures  []error
	)
	record := func(r *producer.SendResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures = append(failures, err)
			return
		}
		byCluster[r.Cluster+" ("+r.PhysicalTopic+")"]++
		laneName := r.Lane
		if laneName == "" {
			laneName = "base"
		}
		byLane[laneName]++
	}
	start := time.Now()

	// 1. Plain synchronous sends, paced like requests of a service. (The
	// producer sticks to the broker failover picked for up to 50 ms, so
	// that concurrent sends share batches: the shares follow the weights
	// over seconds of traffic, while a run this short makes a few picks.)
	third := max(n/3, 1)
	for i := range third {
		time.Sleep(time.Millisecond)
		r, err := p.Send(ctx, &producer.Message{
			Topic: "orders", Tag: "created",
			Keys: []string{fmt.Sprintf("order-%d", i)},
			Body: []byte(fmt.Sprintf(`{"order":%d}`, i)),
		})
		record(r, err)
		if err == nil {
			paced[r.Cluster]++
		}
		if err == nil && i < 3 {
			fmt.Printf("sent %s -> %s %s queue %d offset %d\n", r.MessageID, r.Cluster, r.Endpoint, r.QueueID, r.Offset)
		}
	}

	// 2. Asynchronous sends carrying a lane: every message sent under this
	// context gets the lane property, so its consumers of lane "gray.v2"
	// (falling back to "gray", then base) handle it.
	laneCtx := lane.WithLane(ctx, "gray.v2")
	var wg sync.WaitGroup
	for i := range third {
		wg.Add(1)
		p.SendAsync(laneCtx, &producer.Message{
			Topic: "orders", Tag: "paid",
			Body: []byte(fmt.Sprintf(`{"order":%d,"paid":true}`, i)),
		}, func(r *producer.SendResult, err error) {
			record(r, err)
			wg.Done()
		})
	}
	wg.Wait()

	// 3. One explicit batch, with a FIFO message group: its messages stay
	// in order in one queue.
	batch := make([]*producer.Message, max(n-2*third, 1))
	for i := range batch {
		batch[i] = &producer.Message{
			Topic: "orders", Tag: "shipped", MessageGroup: "customer-42",
			Body: []byte(fmt.Sprintf(`{"step":%d}`, i)),
		}
	}
	results, err := p.SendBatch(ctx, batch)
	for i, r := range results {
		if r == nil {
			continue
		}
		record(r, nil)
		if i == 0 || i == len(results)-1 {
			fmt.Printf("batch message %d -> %s queue %d offset %d\n", i, r.Cluster, r.QueueID, r.Offset)
		}
	}
	if err != nil {
		record(nil, err)
	}
	elapsed := time.Since(start)

	// Close flushes anything buffered and tells the brokers goodbye.
	if err := p.Close(ctx); err != nil {
		return err
	}

	total := 0
	fmt.Printf("\npaced sends by cluster (weights %s 60, %s 40; a pick lasts up to 50 ms, so shares follow the weights over seconds):", dc1.Name, dc2.Name)
	for _, k := range sortedKeys(paced) {
		fmt.Printf(" %s %d", k, paced[k])
	}
	fmt.Println()
	fmt.Println("all sends:")
	for _, k := range sortedKeys(byCluster) {
		fmt.Printf("  cluster %-28s %5d messages\n", k, byCluster[k])
		total += byCluster[k]
	}
	for _, k := range sortedKeys(byLane) {
		fmt.Printf("  lane    %-28s %5d messages\n", k, byLane[k])
	}
	fmt.Printf("  %d messages stored in %v, %d failed\n", total, elapsed.Round(time.Millisecond), len(failures))
	if len(failures) > 0 {
		return fmt.Errorf("%d sends failed, first: %w", len(failures), failures[0])
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
