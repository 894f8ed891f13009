package main

import (
	"testing"

	"github.com/twinmq/twinmq/internal/leakcheck"
)

// TestMain fails the run when a goroutine started by the tests outlives them:
// every goroutine must have an owner whose Close waits for it.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
