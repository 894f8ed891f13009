package failover

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A reload that turns the quarantine off (negative: "never", without a
// checker) while a resource sits down in quarantine does not release it.
// The maintainer that the old tuning started used to keep running and
// compare the time down against the new, negative quarantine, which every
// duration passes.
func TestReconfigureToNeverQuarantineKeepsResourceDown(t *testing.T) {
	p := newPicker(t, []Resource[string]{{Key: "a"}, {Key: "b"}}, Config[string]{
		CheckInterval: 5 * time.Millisecond,
		Quarantine:    time.Hour,
	})
	a := lookup(t, p, "a")
	failN(p, a, 7)
	require.True(t, a.IsDown())
	require.NoError(t, p.Reconfigure(Config[string]{CheckInterval: 5 * time.Millisecond, Quarantine: -1}))
	time.Sleep(100 * time.Millisecond)
	require.True(t, a.IsDown(), "Quarantine -1 means never, yet the down resource was released (weight %v)", a.Weight())
}
