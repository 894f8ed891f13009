package producer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/twinmq/twinmq/failover"
)

// stickyTarget is a broker a topic's ordinary messages currently go to.
type stickyTarget struct {
	h     *failover.Handle[*brokerTarget]
	until time.Time    // pick again after this
	left  atomic.Int64 // or after this many more bytes
}

// stickyFor bounds how long a topic sticks to one broker, so that the
// shares follow the weights closely at low rates too; stickyBatches (times
// batchMaxBytes) bounds the bytes it sends there, and the bytes a broker
// target puts in one queue, so that at high rates they follow as well. See
// the package doc for why a pick should last.
const (
	stickyFor     = 50 * time.Millisecond
	stickyBatches = 16
)

// Spreading. One sticky target makes the biggest batches, but then every
// batch of the moment goes through one serial chain (encode, one broker's
// decode and append, the reply), and while a batch is in flight the client
// and that broker mostly wait. Sending to two brokers at once runs two
// chains side by side: with 64 synchronous senders on two cores that is
// 10-30% more messages per second in BenchmarkProduce. But it halves the
// batches, which costs CPU per message on both sides; where the CPU rather
// than the chain is the limit (producer, brokers and consumers sharing two
// cores in BenchmarkE2E) two targets deliver 20% less.
//
// So the width is measured, not guessed. Small batches always stay on one
// target: splitting them would only add requests. Once a topic's batches
// are large, it starts with two targets and every spreadSettle windows
// tries the other width for two windows (the first lets the batches in
// flight drain); it switches when the second delivered spreadGain times
// the messages per second of the recent windows at the chosen width. Under
// a load that does not depend on the width (senders that do not wait for
// their results, at a steady rate) the rates tie and the choice stays.
//
// A trial is not free: it runs at the worse width for a while, and every
// change of width ends sticky picks, whose new batch keys must grow back
// (at 64 synchronous senders, trials every 200 ms cost 5-10% of the
// throughput of holding two targets). So each trial that confirms the
// choice doubles the time to the next, up to spreadSettleMax windows; a
// switch, or recent windows whose rate strays from the long-run rate by
// more than spreadShift, brings trials back to every spreadSettle windows,
// so a changed load is measured again within a fraction of a second.
const (
	maxSpread = 2
	// A topic may spread once its batches average at least spreadWiden
	// messages and goes back to one target below spreadNarrow; the gap
	// keeps it from flapping when halved batches are mid-sized.
	spreadWiden  = 24
	spreadNarrow = 8
	// avgShift sets the weight of a new batch in the running average
	// (1/8), and fixShift the fixed-point scale of the average.
	avgShift = 3
	fixShift = 4

	spreadWindow    = 10 * time.Millisecond
	spreadSettle    = 20
	spreadSettleMax = 16 * spreadSettle
	spreadGain      = 1.05
	spreadShift     = 0.3
	slowWindows     = 16
	// A batch later than spreadGap after the window began ends the window
	// unmeasured (see observe).
	spreadGap = 4 * spreadWindow
)

// spread is the sticky state of a topic's ordinary messages: up to
// maxSpread slots, each holding a target failover picked. Messages take the
// active slots in turn; each slot re-picks on its own when its time or
// bytes run out, so over time the shares follow weights and health exactly
// as with one slot. Two slots may hold the same broker; their messages then
// share its current queue and so its batches.
type spread struct {
	slots [maxSpread]atomic.Pointer[stickyTarget]
	next  atomic.Uint32
	width atomic.Int32 // active slots - 1 (the zero value is one slot)

	mu  sync.Mutex // guards avg and ctl; taken once per batch
	avg int64      // running average of batch sizes, << fixShift
	ctl spreadCtl
}

// spreadCtl is the width controller of a spreading topic (see above).
type spreadCtl struct {
	on     bool       // batches are large enough to spread
	chosen int32      // the width the measurements favour, as in spread.width
	start  time.Time  // of the current window
	items  int        // messages flushed in the current window
	wins   int        // windows at the chosen width since the last trial
	settle int        // windows between trials, spreadSettle to spreadSettleMax
	slow   float64    // long-run rate at the chosen width (weight 1/slowWindows)
	recent [3]float64 // rates of the latest windows at the chosen width
	nrec   int        // how many of recent are filled
	trial  int        // 0: none; 1: trying the other width, draining; 2: measuring it
}

// observe feeds a batch of items, flushed at now, into the average and the
// width controller.
func (s *spread) observe(items int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.avg += (int64(items)<<fixShift - s.avg) >> avgShift
	avg := s.avg
	c := &s.ctl
	switch {
	case !c.on && avg >= spreadWiden<<fixShift:
		*c = spreadCtl{on: true, chosen: maxSpread - 1, start: now, settle: spreadSettle}
		s.width.Store(c.chosen)
		return
	case c.on && avg < spreadNarrow<<fixShift:
		*c = spreadCtl{}
		s.width.Store(0)
		return
	case !c.on:
		return
	}
	elapsed := now.Sub(c.start)
	if elapsed > spreadGap {
		// The topic was idle (or nearly): a window over the pause would
		// measure the pause, not the width. Measuring starts again here.
		c.items, c.start = items, now
		return
	}
	c.items += items
	if elapsed < spreadWindow {
		return
	}
	rate := float64(c.items) / elapsed.Seconds()
	c.items, c.start = 0, now
	switch c.trial {
	case 0:
		copy(c.recent[1:], c.recent[:])
		c.recent[0] = rate
		c.nrec = min(c.nrec+1, len(c.recent))
		if c.nrec == len(c.recent) {
			// The load moved when the recent windows together stray from
			// the long-run rate: one slow window (a GC cycle) does not.
			base := c.base()
			if c.slow == 0 {
				c.slow = base
			}
			c.slow += (rate - c.slow) / slowWindows
			if base < c.slow*(1-spreadShift) || base > c.slow*(1+spreadShift) {
				c.settle, c.slow = spreadSettle, base
			}
		}
		if c.wins++; c.wins >= c.settle {
			c.trial = 1
			s.width.Store(maxSpread - 1 - c.chosen)
		}
	case 1:
		c.trial = 2
	case 2:
		if rate > c.base()*spreadGain {
			c.chosen = maxSpread - 1 - c.chosen
			c.recent[0], c.nrec = rate, 1
			c.settle, c.slow = spreadSettle, 0
		} else {
			c.settle = min(2*c.settle, spreadSettleMax)
		}
		s.width.Store(c.chosen)
		c.trial, c.wins = 0, 0
	}
}

// base is the mean rate of the recent windows at the chosen width.
func (c *spreadCtl) base() float64 {
	var base float64
	for _, r := range c.recent[:c.nrec] {
		base += r / float64(c.nrec)
	}
	return base
}

// slot returns the slot the next message uses.
func (s *spread) slot() *atomic.Pointer[stickyTarget] {
	w := s.width.Load()
	if w == 0 {
		return &s.slots[0]
	}
	return &s.slots[s.next.Add(1)%uint32(w+1)]
}

// reset ends every slot's stickiness (a reload or a route change).
func (s *spread) reset() {
	for i := range s.slots {
		s.slots[i].Store(nil)
	}
}

// unstick ends the stickiness of the slots holding h (after a failed
// request there).
func (s *spread) unstick(h *failover.Handle[*brokerTarget]) {
	for i := range s.slots {
		if t := s.slots[i].Load(); t != nil && t.h == h {
			s.slots[i].CompareAndSwap(t, nil)
		}
	}
}

// pickSticky picks the target of an ordinary message. Messages of a topic
// stick to the broker failover picked until rotateBytes were sent there or
// stickyFor passed, then failover picks again. Over time the shares follow
// the weights and health, as with a pick per message; but the messages of a
// moment share one target (two under heavy load, see spread) and so form
// full batches instead of one small batch per broker, which costs the
// brokers and the client several times less CPU per message (see
// BenchmarkProduce, cpu-us/msg). A retry picks afresh, avoiding what it
// tried; a failed request, a broker going down and a reload end the
// stickiness at once.
func (p *Producer) pickSticky(pd *pending) (*failover.Handle[*brokerTarget], error) {
	ts := pd.topic
	if len(pd.tried) > 0 {
		return ts.picker.PickExcluding(pd.tried)
	}
	slot := ts.spread.slot()
	if s := slot.Load(); s != nil && pd.start.Before(s.until) && s.left.Add(-int64(pd.size)) > 0 && !s.h.IsDown() {
		return s.h, nil
	}
	h, err := ts.picker.Pick()
	if err != nil {
		return nil, err
	}
	s := &stickyTarget{h: h, until: pd.start.Add(stickyFor)}
	s.left.Store(p.settings.Load().rotateBytes)
	slot.Store(s)
	return h, nil
}

// unstick ends the topic's stickiness to h.
func (ts *topicState) unstick(h *failover.Handle[*brokerTarget]) { ts.spread.unstick(h) }
