package consumer_test

import (
	"context"
	"log"
	"time"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	"github.com/twinmq/twinmq/lane"
)

// A consumer of lane "gray" in group "billing": it handles the messages of
// lanes "gray" and "gray.*" (unless a more specific lane has consumers of
// its own) and forwards everything else to the consumers of those lanes.
// The document (a file, watched) gives the clusters of "orders" and the
// group's concurrency and maximum attempts; changes apply live.
func ExampleNew() {
	ctx := context.Background()
	reg := lane.NewMemoryRegistry(lane.MemoryOptions{}) // a shared registry in production
	c, err := consumer.New(ctx, "billing", "orders",
		func(ctx context.Context, m *consumer.Message) error {
			l, _ := lane.FromContext(ctx) // the message's lane, for downstream calls
			log.Printf("order %s (lane %q, attempt %d)", m.Body, l, m.DeliveryAttempt)
			return nil // nil acks; an error retries, then dead-letters
		},
		consumer.WithSource(config.File("twinmq.json", config.FileOptions{})),
		consumer.WithLane("gray"),
		consumer.WithLaneRegistry(reg),
		consumer.WithForwardToken("secret shared by the group"),
		consumer.WithForwardListen(":7070", "10.0.0.5:7070"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}()
}
