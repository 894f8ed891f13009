package driver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

func TestRetryPolicyBackoff(t *testing.T) {
	exp := RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: time.Second, Multiplier: 2}
	assert.Equal(t, 10*time.Millisecond, exp.Backoff(0))
	assert.Equal(t, 10*time.Millisecond, exp.Backoff(1))
	assert.Equal(t, 20*time.Millisecond, exp.Backoff(2))
	assert.Equal(t, time.Second, exp.Backoff(20))
	custom := RetryPolicy{Customized: []time.Duration{time.Second, 5 * time.Second}}
	assert.Equal(t, time.Second, custom.Backoff(1))
	assert.Equal(t, 5*time.Second, custom.Backoff(2))
	assert.Equal(t, 5*time.Second, custom.Backoff(9))
	assert.Equal(t, time.Duration(0), RetryPolicy{}.Backoff(1))
}

func TestServerSettingsFromConsumerEcho(t *testing.T) {
	ct := rmqpb.ClientType_SIMPLE_CONSUMER
	fifo, batch := true, int32(32)
	s := serverSettingsFromPB(&rmqpb.Settings{
		ClientType:     &ct,
		RequestTimeout: durationpb.New(3 * time.Second),
		BackoffPolicy: &rmqpb.RetryPolicy{MaxAttempts: 17, Strategy: &rmqpb.RetryPolicy_CustomizedBackoff{
			CustomizedBackoff: &rmqpb.CustomizedBackoff{Next: []*durationpb.Duration{durationpb.New(time.Second), durationpb.New(5 * time.Second)}}}},
		PubSub: &rmqpb.Settings_Subscription{Subscription: &rmqpb.Subscription{
			Fifo: &fifo, ReceiveBatchSize: &batch, LongPollingTimeout: durationpb.New(20 * time.Second)}},
		Metric: &rmqpb.Metric{On: true},
	})
	assert.Equal(t, ServerSettings{
		ClientType: SimpleConsumer, RequestTimeout: 3 * time.Second,
		Retry: RetryPolicy{MaxAttempts: 17, Customized: []time.Duration{time.Second, 5 * time.Second}},
		FIFO:  true, ReceiveBatchSize: 32, LongPollingTimeout: 20 * time.Second, MetricsOn: true,
	}, s)
}
