package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/twinmq/twinmq/config"
	tmqotel "github.com/twinmq/twinmq/contrib/otel"
	"github.com/twinmq/twinmq/producer"
)

// TestFailedSendSpan: a send that fails ends its span failed, with the
// error the caller got.
func TestFailedSendSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"nowhere": {Clusters: []config.Cluster{
		{Name: "dead", Endpoints: []string{"127.0.0.1:1"}, Topic: "nowhere", Weight: 100},
	}}}
	cfg.Timeouts.Request = config.Duration(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := producer.New(ctx, producer.WithConfig(cfg), producer.WithHooks(tmqotel.New(tmqotel.WithTracerProvider(tp))))
	require.NoError(t, err)
	defer func() { _ = p.Close(context.Background()) }()

	sctx, sendCancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer sendCancel()
	_, sendErr := p.Send(sctx, &producer.Message{Topic: "nowhere", Body: []byte("x"), Keys: []string{"k1", "k2"}})
	require.Error(t, sendErr)

	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	s := spans[0]
	assert.Equal(t, "send nowhere", s.Name)
	assert.Equal(t, trace.SpanKindProducer, s.SpanKind)
	assert.Equal(t, codes.Error, s.Status.Code)
	assert.Equal(t, sendErr.Error(), s.Status.Description)
	assertAttrs(t, &s, map[string]any{
		"messaging.rocketmq.message.keys": []string{"k1", "k2"}, "error.type": "_OTHER",
	})
}
