package batch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/internal/promreg"
)

// reason says why a batch left.
type reason uint8

const (
	reasonFull  reason = iota // a per-batch cap was reached
	reasonTimer               // the oldest item reached MaxDelay
	reasonIdle                // the key had a free slot and nothing to wait for
	reasonClose               // Close drained the buffer
	numReasons
)

func (r reason) String() string {
	switch r {
	case reasonFull:
		return "full"
	case reasonTimer:
		return "timer"
	case reasonIdle:
		return "idle"
	case reasonClose:
		return "close"
	}
	return "unknown"
}

// metrics holds the accumulator's collectors. A nil *metrics records nothing.
type metrics struct {
	flushes    [numReasons]prometheus.Counter
	batchItems prometheus.Histogram
	batchBytes prometheus.Histogram
	set        *promreg.Set // unregistered by Close
}

func newMetrics(reg prometheus.Registerer, buffered func() float64) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	flushes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "twinmq", Subsystem: "batch", Name: "flushes_total",
		Help: "Batches handed to the flush function, by the reason they left.",
	}, []string{"reason"})
	m := &metrics{
		batchItems: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "batch", Name: "size_items",
			Help:    "Items per flushed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13),
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "twinmq", Subsystem: "batch", Name: "size_bytes",
			Help:    "Bytes per flushed batch.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}),
	}
	for r := range numReasons {
		m.flushes[r] = flushes.WithLabelValues(r.String())
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "twinmq", Subsystem: "batch", Name: "buffered_bytes",
		Help: "Bytes reserved by accepted items not yet completed, buffered or in flight.",
	}, buffered)
	set, err := promreg.Own(reg, flushes, m.batchItems, m.batchBytes, gauge)
	if err != nil {
		return nil, fmt.Errorf("batch: registering metrics: %w", err)
	}
	m.set = set
	return m, nil
}

func (m *metrics) observe(r reason, items int, bytes int64) {
	if m == nil {
		return
	}
	m.flushes[r].Inc()
	m.batchItems.Observe(float64(items))
	m.batchBytes.Observe(float64(bytes))
}
