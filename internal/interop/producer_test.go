//go:build interop

package interop

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

// Topics and group of the producer test, created by interop/run.sh. The
// logic topic maps onto two cluster entries served by the one real proxy,
// each with its own physical topic.
const (
	sdkLogicTopic  = "interop_sdk"
	sdkTopicA      = "interop_sdk_a"
	sdkTopicB      = "interop_sdk_b"
	sdkCheckGroup  = "interop_sdk_check"
	sdkBatchedLane = "interop.sdk"
)

// sdkSent is what a send returned for a message, and its body.
type sdkSent struct {
	res  *producer.SendResult
	body []byte
	lane string
}

// TestInteropProducer sends through the SDK producer to the real proxy in
// every way a user can: one Send at a time, Send from many goroutines at
// once (the producer batches them behind the callers' backs), SendBatch,
// and Send with batching off. Every send must return the message's id and
// offset, and every message must be received back from the physical topic
// the result names, with its body, at the offset the result names. The
// proxy stores a multi-message request in one queue of its choice and
// answers with the first offset only, so this checks the producer's
// first-offset-plus-index bookkeeping against what the broker really did.
func TestInteropProducer(t *testing.T) {
	endpoint := endpointFromEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	clusters := []sdkCluster{{name: "dc1", physical: sdkTopicA, weight: 100}, {name: "dc2", physical: sdkTopicB, weight: 100}}
	reg := prometheus.NewRegistry()
	p := sdkProducer(t, producer.WithConfig(sdkConfig(endpoint, sdkLogicTopic, true, clusters...)), producer.WithRegisterer(reg))
	plain := sdkProducer(t, producer.WithConfig(sdkConfig(endpoint, sdkLogicTopic, false, clusters...)))

	var mu sync.Mutex
	sent := map[string]sdkSent{}
	record := func(t *testing.T, res *producer.SendResult, body []byte, laneName string) {
		t.Helper()
		require.NotNil(t, res)
		require.NotEmpty(t, res.MessageID)
		require.GreaterOrEqual(t, res.Offset, int64(0))
		require.Equal(t, sdkLogicTopic, res.Topic)
		require.Contains(t, []string{sdkTopicA, sdkTopicB}, res.PhysicalTopic)
		require.Equal(t, map[string]string{sdkTopicA: "dc1", sdkTopicB: "dc2"}[res.PhysicalTopic], res.Cluster)
		require.Equal(t, endpoint, res.Endpoint)
		require.Equal(t, laneName, res.Lane)
		mu.Lock()
		defer mu.Unlock()
		_, dup := sent[res.MessageID]
		require.False(t, dup, "message id %s returned twice", res.MessageID)
		sent[res.MessageID] = sdkSent{res: res, body: body, lane: laneName}
	}

	// One at a time: nothing is in flight, so each goes alone at once.
	for i := range 20 {
		body := sdkBody("single", i)
		res, err := p.Send(ctx, &producer.Message{Topic: sdkLogicTopic, Body: body, Tag: "single"})
		require.NoError(t, err)
		record(t, res, body, "")
	}

	// Concurrent synchronous senders: requests in flight make the
	// others gather, so the proxy gets multi-message requests.
	count0, _, single0 := sdkHistogram(t, reg, "twinmq_batch_size_items", 1)
	const senders, perSender = 64, 25
	type outcome struct {
		res  *producer.SendResult
		body []byte
		err  error
	}
	// sendFrom runs n goroutines of per synchronous Sends each and returns
	// every outcome, checked afterwards on the test goroutine.
	sendFrom := func(pr *producer.Producer, tag string, n, per int) []outcome {
		out := make([]outcome, n*per)
		var wg sync.WaitGroup
		for g := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					body := sdkBody(tag, g*per+i)
					res, err := pr.Send(ctx, &producer.Message{Topic: sdkLogicTopic, Body: body, Tag: tag})
					out[g*per+i] = outcome{res: res, body: body, err: err}
				}
			}()
		}
		wg.Wait()
		return out
	}
	for _, o := range sendFrom(p, "concurrent", senders, perSender) {
		require.NoError(t, o.err)
		record(t, o.res, o.body, "")
	}
	count1, sum1, single1 := sdkHistogram(t, reg, "twinmq_batch_size_items", 1)
	batches, alone := count1-count0, single1-single0
	t.Logf("concurrent phase: %d messages in %d requests (%d of one message)", senders*perSender, batches, alone)
	require.Less(t, alone, batches, "64 concurrent senders must have formed multi-message requests")

	// SendBatch, on a lane: one result per message, in order.
	var batchMsgs []*producer.Message
	for i := range 200 {
		batchMsgs = append(batchMsgs, &producer.Message{Topic: sdkLogicTopic, Body: sdkBody("sendbatch", i), Tag: "sendbatch"})
	}
	results, err := p.SendBatch(lane.WithLane(ctx, sdkBatchedLane), batchMsgs)
	require.NoError(t, err)
	require.Len(t, results, len(batchMsgs))
	for i, res := range results {
		record(t, res, batchMsgs[i].Body, sdkBatchedLane)
	}
	_, sum2, _ := sdkHistogram(t, reg, "twinmq_batch_size_items", 1)
	require.Equal(t, float64(len(batchMsgs)), sum2-sum1, "every SendBatch message went through the accumulator")

	// Batching off: every message alone, from concurrent senders.
	for _, o := range sendFrom(plain, "unbatched", 16, 10) {
		require.NoError(t, o.err)
		record(t, o.res, o.body, "")
	}
	require.Len(t, sent, 20+senders*perSender+len(batchMsgs)+160)

	// Everything comes back, from where the results say.
	perTopic := map[string]map[string]bool{sdkTopicA: {}, sdkTopicB: {}}
	for id, s := range sent {
		perTopic[s.res.PhysicalTopic][id] = true
	}
	t.Logf("split over the two cluster entries: %s %d, %s %d", sdkTopicA, len(perTopic[sdkTopicA]), sdkTopicB, len(perTopic[sdkTopicB]))
	otherQueue := 0
	for _, topic := range []string{sdkTopicA, sdkTopicB} {
		want := perTopic[topic]
		if len(want) == 0 {
			continue
		}
		got := sdkDrain(t, endpoint, sdkCheckGroup, topic, want, 90*time.Second)
		for id := range want {
			s := sent[id]
			require.NotEmpty(t, got[id], "message %s (%.20s) sent to %s was not received", id, s.body, topic)
			// A message is stored once unless an attempt failed after the
			// broker had stored it and the send was retried.
			atOffset := 0
			for _, m := range got[id] {
				require.Equal(t, topic, m.Topic)
				require.Equal(t, s.body, m.Body, "body of %s", id)
				require.Equal(t, s.lane, m.Properties[lane.PropertyLane], "lane of %s", id)
				if m.QueueOffset == s.res.Offset {
					atOffset++
					if m.QueueID != s.res.QueueID {
						otherQueue++
					}
				}
			}
			require.Equal(t, 1, atOffset, "message %s (%.20s): result offset %d, received at %v",
				id, s.body, s.res.Offset, sdkOffsets(got[id]))
			if s.res.Attempts == 1 {
				require.Len(t, got[id], 1, "message %s sent in one attempt was stored more than once", id)
			}
		}
	}
	// The proxy ignores the queue a request names and picks one itself.
	t.Logf("%d of %d messages were stored in another queue than the one their request named", otherQueue, len(sent))
}

func sdkOffsets(ms []*driver.ReceivedMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s/q%d/%d", m.Topic, m.QueueID, m.QueueOffset))
	}
	return out
}
