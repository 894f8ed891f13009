package batch_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twinmq/twinmq/batch"
)

// A flush function sends one batch to one target and returns a result per
// item; here it "stores" strings and answers with their offsets.
func Example() {
	offsets := map[string]int{}
	acc, err := batch.New(batch.Config{
		Limits: batch.Limits{MaxDelay: 5 * time.Millisecond, BatchMaxBytes: 64 << 10},
	}, func(_ context.Context, queue string, items []string, results []batch.Result[int]) error {
		for i, it := range items {
			if strings.TrimSpace(it) == "" {
				results[i].Err = fmt.Errorf("empty body")
				continue
			}
			results[i].Value = offsets[queue]
			offsets[queue]++
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, body := range []string{"hello", "world", " "} {
		off, err := acc.Add(ctx, "queue-0", body, len(body))
		fmt.Println(off, err)
	}
	if err := acc.Close(ctx); err != nil {
		panic(err)
	}
	_, err = acc.Add(ctx, "queue-0", "late", 4)
	fmt.Println(err)
	// Output:
	// 0 <nil>
	// 1 <nil>
	// 0 empty body
	// batch: accumulator closed
}
