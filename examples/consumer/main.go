// Command consumer shows lane routing end to end: it starts two embedded
// clusters, runs three consumers of one group (base, lane "gray" and lane
// "gray.canary"), produces messages tagged with various lanes, and prints
// which consumer handled each one and whether it was forwarded there.
//
//	go run ./examples/consumer            # or: make example-consumer
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

const (
	topic = "orders"
	group = "billing"
	// The group's forwarding credential; a real deployment reads it from
	// its secret store.
	token = "billing-forward-token"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// handled is what the handlers saw.
type handled struct {
	msgLane   string
	by        string
	forwarded bool
	body      string
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Two clusters ("dc1" and "dc2") of two brokers each, as in the
	// producer example.
	env, err := embedded.Start(ctx, embedded.Options{
		ClusterNames:   []string{"dc1", "dc2"},
		Topics:         []embedded.Topic{{Name: topic, Queues: 4}},
		MinLongPolling: 100 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer func() { _ = env.Close(context.Background()) }()

	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{topic: env.TopicConfig(topic)}
	cfg.Consumers = map[string]config.Consumer{group: {Concurrency: 8, MaxAttempts: 5, Mode: config.ModeDirect}}

	reg := lane.NewMemoryRegistry(lane.MemoryOptions{})
	defer reg.Close()

	var (
		mu   sync.Mutex
		seen []handled
	)
	handler := func(name string) consumer.Handler {
		return func(ctx context.Context, m *consumer.Message) error {
			ctxLane, _ := lane.FromContext(ctx) // what a send from here would carry
			mu.Lock()
			seen = append(seen, handled{msgLane: ctxLane, by: name, forwarded: m.Forwarded, body: string(m.Body)})
			mu.Unlock()
			return nil
		}
	}
	var consumers []*consumer.Consumer
	defer func() {
		for _, c := range consumers {
			_ = c.Close(context.Background())
		}
	}()
	for _, ln := range []string{lane.Base, "gray", "gray.canary"} {
		name := ln
		if name == lane.Base {
			name = "base"
		}
		c, err := consumer.New(ctx, group, topic, handler(name),
			consumer.WithConfig(cfg), consumer.WithLane(ln), consumer.WithLaneRegistry(reg),
			consumer.WithForwardToken(token), consumer.WithInstanceName("example-"+name),
			consumer.WithLongPolling(time.Second))
		if err != nil {
			return err
		}
		consumers = append(consumers, c)
	}
	for {
		lanes, err := reg.Lanes(ctx, group)
		if err != nil {
			return err
		}
		if len(lanes) == 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	p, err := producer.New(ctx, producer.WithConfig(cfg))
	if err != nil {
		return err
	}
	defer func() { _ = p.Close(context.Background()) }()
	tags := []string{lane.Base, "gray", "gray.canary", "gray.beta", "blue"}
	const perLane = 3
	for _, tag := range tags {
		for i := 0; i < perLane; i++ {
			body := fmt.Sprintf("order-%s-%d", orBase(tag), i)
			if _, err := p.Send(lane.WithLane(ctx, tag), &producer.Message{Topic: topic, Body: []byte(body)}); err != nil {
				return err
			}
		}
	}

	want := len(tags) * perLane
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= want {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d messages handled: %w", n, want, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(seen, func(i, j int) bool { return seen[i].body < seen[j].body })
	fmt.Printf("%-22s %-13s %-13s %s\n", "message", "message lane", "handled by", "how")
	for _, h := range seen {
		how := "received here"
		if h.forwarded {
			how = "forwarded here"
		}
		fmt.Printf("%-22s %-13s %-13s %s\n", h.body, orBase(h.msgLane), h.by, how)
	}
	fmt.Println("gray.beta falls back to gray, blue (no such lane) to base.")
	return nil
}

func orBase(l string) string {
	if l == lane.Base {
		return "(base)"
	}
	return l
}
