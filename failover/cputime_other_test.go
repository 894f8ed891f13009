//go:build !linux

package failover

import "time"

// threadCPU is unavailable here: the benchmarks fall back to wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
