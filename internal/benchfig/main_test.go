package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScanCollectsFiguresInOrderLastWins(t *testing.T) {
	in := strings.Join([]string{
		"goos: linux",
		"BenchmarkA-2   	 100	  5000 ns/op	 12.5 fig:a_msgs_s",
		"BenchmarkB-2   	 100	  5000 ns/op	 7 fig:b_ms	 3 fig:c_ns",
		"BenchmarkA-2   	 100	  5000 ns/op	 13.25 fig:a_msgs_s",
		"PASS",
	}, "\n")
	var out bytes.Buffer
	f, err := scan(strings.NewReader(in), &out)
	require.NoError(t, err)
	require.Equal(t, []string{"a_msgs_s", "b_ms", "c_ns"}, f.order)
	require.Equal(t, 13.25, f.values["a_msgs_s"])
	require.False(t, f.failed)
	require.Equal(t, in+"\n", out.String(), "input is echoed unchanged")
}

func TestScanMarksFailure(t *testing.T) {
	f, err := scan(strings.NewReader("--- FAIL: BenchmarkX\nFAIL\n"), &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, f.failed)
}

func TestFormat(t *testing.T) {
	require.Equal(t, "1234567", format(1234567))
	require.Equal(t, "0.5", format(0.5))
	require.Equal(t, "12.346", format(12.3456))
}
