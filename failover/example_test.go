package failover_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/twinmq/twinmq/failover"
)

// A sender prefers the local data centre and retries on another target
// within its deadline: a dead cluster costs it latency, not an error.
func Example() {
	p, err := failover.New([]failover.Resource[string]{
		{Key: "local-a", Value: "10.0.0.1:8081", Priority: 0},
		{Key: "local-b", Value: "10.0.0.2:8081", Priority: 0},
		{Key: "remote-a", Value: "10.1.0.1:8081", Priority: 1},
	}, failover.Config[string]{Name: "orders"})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	// The local cluster goes dark: every call to it fails.
	send := func(addr string) error {
		if addr == "10.1.0.1:8081" {
			return nil
		}
		return errors.New("connection refused")
	}

	var tried []*failover.Handle[string]
	for {
		h, err := p.PickExcluding(tried)
		if err != nil {
			fmt.Println("gave up:", err)
			return
		}
		start := time.Now()
		if err := send(h.Value()); err != nil {
			p.Failure(h, err)
			tried = append(tried, h)
			continue
		}
		p.Success(h, time.Since(start))
		fmt.Println("sent via", h.Key(), "after", len(tried), "failed attempts")
		return
	}
	// Output: sent via remote-a after 2 failed attempts
}
