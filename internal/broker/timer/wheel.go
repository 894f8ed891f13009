package timer

// entry is one scheduled message in the wheel.
type entry struct {
	at     int64 // requested delivery time, unix ms
	slot   int64 // slot time, unix ms: at, or later when at had passed, or the roll time
	offset int64 // queue offset of the message in SystemTopic
	rolled bool  // at is beyond the roll window: re-enqueue at slot time
}

// wheel is a two-level timing wheel (see the package doc). It is not safe
// for concurrent use; the Timer guards it.
type wheel struct {
	precision int64 // ms per slot
	n         int64 // slots of the fine wheel, a power of two
	base      int64 // absolute index of the next slot to process
	rev       int64 // revolution the fine wheel holds (base / n, or ahead of it)
	fine      [][]entry
	fineCount int
	far       map[int64][]entry // later revolutions, by revolution
	farCount  int
}

func newWheel(precisionMs int64, slots int, startMs int64) *wheel {
	w := &wheel{
		precision: precisionMs,
		n:         int64(slots),
		fine:      make([][]entry, slots),
		far:       map[int64][]entry{},
	}
	w.base = startMs / precisionMs
	w.rev = w.base / w.n
	return w
}

// len is the number of entries held.
func (w *wheel) len() int { return w.fineCount + w.farCount }

// cursor is the time of the next slot to process: entries with a slot time
// below it were handed out.
func (w *wheel) cursor() int64 { return w.base * w.precision }

// insert adds e; a slot time before the cursor is moved up to it, so the
// entry goes out with the next turn. It returns the slot time used.
func (w *wheel) insert(e entry) int64 {
	if e.slot < w.cursor() {
		e.slot = w.cursor()
	}
	abs := e.slot / w.precision
	if r := abs / w.n; r != w.rev {
		w.far[r] = append(w.far[r], e)
		w.farCount++
		return e.slot
	}
	i := abs & (w.n - 1)
	w.fine[i] = append(w.fine[i], e)
	w.fineCount++
	return e.slot
}

// setBase moves the cursor to slot abs (never backwards) and loads the far
// bucket of a revolution the cursor enters.
func (w *wheel) setBase(abs int64) {
	if abs <= w.base {
		return
	}
	w.base = abs
	if r := abs / w.n; r != w.rev {
		w.rev = r
		if b, ok := w.far[r]; ok {
			delete(w.far, r)
			w.farCount -= len(b)
			for _, e := range b {
				i := (e.slot / w.precision) & (w.n - 1)
				w.fine[i] = append(w.fine[i], e)
			}
			w.fineCount += len(b)
		}
	}
}

// minFar returns the smallest revolution held in far, or -1.
func (w *wheel) minFar() int64 {
	m := int64(-1)
	for r := range w.far {
		if m < 0 || r < m {
			m = r
		}
	}
	return m
}

// nextFine returns the absolute index of the first non-empty fine slot at or
// after the cursor, or -1.
func (w *wheel) nextFine() int64 {
	if w.fineCount == 0 {
		return -1
	}
	end := (w.rev + 1) * w.n
	for abs := max(w.base, w.rev*w.n); abs < end; abs++ {
		if len(w.fine[abs&(w.n-1)]) > 0 {
			return abs
		}
	}
	return -1
}

// advance hands out, in slot order, the entries of every slot whose whole
// span ends at or before nowMs, and moves the cursor past them. Appends to
// dst.
func (w *wheel) advance(nowMs int64, dst []entry) []entry {
	lastDue := (nowMs+1)/w.precision - 1 // slot abs is due when (abs+1)*p <= now+1... i.e. its last ms has passed
	for w.base <= lastDue {
		if w.fineCount == 0 {
			target := lastDue + 1
			if r := w.minFar(); r >= 0 && r*w.n < target {
				target = r * w.n
			}
			if target <= w.base {
				// The far bucket belongs to the current revolution: load it.
				target = w.base + 1
			}
			w.setBase(target)
			continue
		}
		abs := w.nextFine()
		if abs < 0 || abs > lastDue {
			w.setBase(lastDue + 1)
			break
		}
		i := abs & (w.n - 1)
		dst = append(dst, w.fine[i]...)
		w.fineCount -= len(w.fine[i])
		clear(w.fine[i])
		w.fine[i] = w.fine[i][:0]
		w.setBase(abs + 1)
	}
	return dst
}

// nextDue returns the time (unix ms) at which the next slot holding entries
// becomes due, and false when the wheel is empty. For entries of a later
// revolution it is the start of that revolution, where they load.
func (w *wheel) nextDue() (int64, bool) {
	if abs := w.nextFine(); abs >= 0 {
		return (abs+1)*w.precision - 1, true
	}
	if r := w.minFar(); r >= 0 {
		return r * w.n * w.precision, true
	}
	return 0, false
}
