package failover

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConcurrentPicksReportsAndUpdates hammers one picker from several
// goroutines (picks with exclusions, every kind of report, resource-set
// swaps and the probing round) and checks the invariants hold throughout.
// Its value is under -race.
func TestConcurrentPicksReportsAndUpdates(t *testing.T) {
	sets := [][]Resource[int]{
		{{Key: "a", Value: 1}, {Key: "b", Value: 2, MinWeight: 1}, {Key: "r", Value: 3, Priority: 1}},
		{{Key: "a", Value: 1, MaxWeight: 50}, {Key: "c", Value: 4, Priority: 1}, {Key: "r", Value: 3, Priority: 1}},
	}
	p := newPicker(t, sets[0], Config[int]{
		InflightAware: true,
		SlowThreshold: 50 * time.Millisecond,
		CheckInterval: time.Millisecond,
		Checker: func(ctx context.Context, h *Handle[int]) error {
			if rand.IntN(2) == 0 {
				return errBoom
			}
			return nil
		},
		WeightListener: func(string, float64, float64) {},
	})

	const pickers, rounds = 4, 20_000
	var wg sync.WaitGroup
	errs := make(chan error, pickers)
	for range pickers {
		wg.Go(func() {
			var tried []*Handle[int]
			for i := range rounds {
				h, err := p.PickExcluding(tried)
				if errors.Is(err, ErrNoResource) {
					tried = tried[:0]
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if w := h.Weight(); w < 0 || w > h.MaxWeight() {
					errs <- errors.New("weight out of bounds")
					return
				}
				switch i % 10 {
				case 0, 1, 2:
					p.Failure(h, errBoom)
					tried = append(tried, h)
				case 3:
					p.Success(h, time.Second) // slow
				case 4:
					p.Release(h)
				case 5:
					p.Failure(h, context.Canceled)
				default:
					p.Success(h, time.Millisecond)
					tried = tried[:0]
				}
				if i%5000 == 0 {
					p.Down(h, errBoom)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			if err := p.Update(sets[i%2]); err != nil {
				errs <- err
				return
			}
			_ = p.Handles()
			time.Sleep(100 * time.Microsecond)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, h := range p.Handles() {
		require.GreaterOrEqual(t, h.Weight(), h.MinWeight())
		require.LessOrEqual(t, h.Weight(), h.MaxWeight())
		require.GreaterOrEqual(t, h.Inflight(), int64(0))
	}
}
