// Command migration moves a logic topic from a RocketMQ 4.x cluster, spoken
// to over the classic remoting protocol, to a 5.x cluster reached through
// gRPC, without restarting the producer. Both clusters are embedded in this
// process: "old" serves remoting (through its name server) and says it is
// RocketMQ 4.9.7, which has no timer; "new" serves gRPC.
//
// The configuration maps the logic topic "orders" onto both. Each step
// publishes a new version of the document, as the platform would, and the
// producer applies it live while paced senders keep sending:
//
//  1. weights old 100, new 0: everything goes to the 4.x cluster;
//  2. weights 50 / 50: the traffic splits; a delayed message still lands on
//     "new", the only cluster with a timer;
//  3. weights 0 / 100: the 4.x cluster is drained.
//
// It exits 0 when every send succeeded.
//
//	go run ./examples/migration        # or: make example-migration
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/producer"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	oldEnv, err := start(ctx, "old")
	if err != nil {
		return err
	}
	defer func() { _ = oldEnv.Close(context.Background()) }()
	for _, b := range oldEnv.Clusters()[0].Brokers() {
		b.SetRemotingVersion(407) // answer as RocketMQ 4.9.7 does
	}
	newEnv, err := start(ctx, "new")
	if err != nil {
		return err
	}
	defer func() { _ = newEnv.Close(context.Background()) }()
	fmt.Printf("old: RocketMQ 4.9.7 over remoting, name server %s\nnew: RocketMQ 5 over gRPC, %v\n",
		oldEnv.NameServer(), newEnv.Clusters()[0].Endpoints())

	doc := func(oldWeight, newWeight int) config.Version {
		cfg := config.Default()
		cfg.Topics = map[string]config.Topic{"orders": {Clusters: []config.Cluster{
			// A remoting cluster's endpoints are its name servers.
			{Name: "old", Protocol: config.ProtocolRemoting, Endpoints: []string{oldEnv.NameServer()}, Topic: "orders", Weight: oldWeight},
			{Name: "new", Endpoints: newEnv.Clusters()[0].Endpoints(), Topic: "orders", Weight: newWeight},
		}}}
		return config.Version{Config: cfg, Revision: fmt.Sprintf("old=%d,new=%d", oldWeight, newWeight)}
	}
	// The platform's feed of versions; config.Chan turns it into a Source.
	versions := make(chan config.Version, 1)
	versions <- doc(100, 0)
	p, err := producer.New(ctx, producer.WithSource(config.Chan(versions)))
	if err != nil {
		return err
	}
	defer func() { _ = p.Close(context.Background()) }()

	steps := []struct{ old, new int }{{100, 0}, {50, 50}, {0, 100}}
	var failed atomic.Int64
	for i, s := range steps {
		if i > 0 {
			versions <- doc(s.old, s.new)
			if err := waitForRevision(ctx, p, fmt.Sprintf("old=%d,new=%d", s.old, s.new)); err != nil {
				return err
			}
		}
		shares := send(ctx, p, 2*time.Second, &failed)
		fmt.Printf("\nstep %d, weights old %d new %d: %d messages to old, %d to new\n", i+1, s.old, s.new, shares["old"], shares["new"])
		if s.old > 0 && s.new > 0 {
			for range 5 {
				r, err := p.Send(ctx, &producer.Message{Topic: "orders", Body: []byte("later"), DeliveryTime: time.Now().Add(time.Minute)})
				if err != nil {
					return fmt.Errorf("delayed send: %w", err)
				}
				fmt.Printf("  a delayed message went to %s (attempts: %d)\n", r.Cluster, r.Attempts)
			}
		}
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d sends failed", n)
	}
	fmt.Println("\nevery send succeeded; the 4.x cluster is drained")
	return nil
}

// start runs one embedded cluster of two brokers holding the topic.
func start(ctx context.Context, name string) (*embedded.Env, error) {
	return embedded.Start(ctx, embedded.Options{ClusterNames: []string{name}, BrokersPerCluster: 2,
		Topics: []embedded.Topic{{Name: "orders", Type: embedded.Mixed}}})
}

// send runs 8 paced senders for d and counts where their messages went.
func send(ctx context.Context, p *producer.Producer, d time.Duration, failed *atomic.Int64) map[string]int {
	var (
		mu     sync.Mutex
		shares = map[string]int{}
		wg     sync.WaitGroup
	)
	end := time.Now().Add(d)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				r, err := p.Send(ctx, &producer.Message{Topic: "orders", Body: []byte("order")})
				if err != nil {
					failed.Add(1)
					fmt.Fprintln(os.Stderr, "send:", err)
					return
				}
				mu.Lock()
				shares[r.Cluster]++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return shares
}

// waitForRevision waits until the producer runs the given revision of the
// document (State says which one it applied).
func waitForRevision(ctx context.Context, p *producer.Producer, rev string) error {
	for p.State().Config.Revision != rev {
		select {
		case <-ctx.Done():
			return errors.New("the producer did not apply revision " + rev)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
