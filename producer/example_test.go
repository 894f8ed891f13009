package producer_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

// A service watches its configuration file and sends through a logic
// topic; the lane of the incoming request travels with the message.
func Example() {
	ctx := context.Background()
	p, err := producer.New(ctx,
		producer.WithSource(config.File("twinmq.json", config.FileOptions{})),
		producer.WithLogger(zap.NewExample()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()

	sendCtx, cancel := context.WithTimeout(lane.WithLane(ctx, "gray.v2"), 3*time.Second)
	defer cancel()
	res, err := p.Send(sendCtx, &producer.Message{Topic: "orders", Tag: "created", Body: []byte(`{"id":42}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.MessageID, res.Cluster, res.Offset)
}

// Asynchronous sends return at once; the callback gets the outcome.
func ExampleProducer_SendAsync() {
	var p *producer.Producer // from producer.New
	p.SendAsync(context.Background(), &producer.Message{Topic: "orders", Body: []byte("x")},
		func(res *producer.SendResult, err error) {
			if err != nil {
				log.Printf("send failed: %v", err)
				return
			}
			log.Printf("stored as %s on %s", res.MessageID, res.Cluster)
		})
}
