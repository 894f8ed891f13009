package embedded_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twinmq/twinmq/embedded"
)

// Start two clusters of two brokers with a topic and a group, print the
// topology, and stop everything.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := embedded.Start(ctx, embedded.Options{
		Topics: []embedded.Topic{{Name: "orders", Queues: 4}},
		Groups: []embedded.Group{{Name: "billing"}},
	})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer env.Close(context.Background())
	for _, c := range env.Clusters() {
		fmt.Println(c.Name, len(c.Endpoints()), "brokers")
	}
	b := env.Clusters()[0].Brokers()[1]
	fmt.Println(b.Name())
	// Output:
	// cluster-a 2 brokers
	// cluster-b 2 brokers
	// cluster-a-broker-1
}
