package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScanCollectsFiguresInOrder(t *testing.T) {
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
	require.Equal(t, []float64{12.5, 13.25}, f.values["a_msgs_s"])
	require.False(t, f.failed)
	require.Equal(t, in+"\n", out.String(), "input is echoed unchanged")
}

func TestScanMarksFailure(t *testing.T) {
	f, err := scan(strings.NewReader("--- FAIL: BenchmarkX\nFAIL\n"), &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, f.failed)
}

func TestMedian(t *testing.T) {
	require.Equal(t, 0.0, median(nil))
	require.Equal(t, 5.0, median([]float64{5}))
	require.Equal(t, 3.0, median([]float64{9, 1, 3}), "odd count: the middle value, whatever the order")
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}), "even count: the mean of the two middle values")
	vs := []float64{3, 1, 2}
	median(vs)
	require.Equal(t, []float64{3, 1, 2}, vs, "the input is not reordered")
}

func TestFormat(t *testing.T) {
	require.Equal(t, "1234567", format(1234567))
	require.Equal(t, "0.5", format(0.5))
	require.Equal(t, "12.346", format(12.3456))
}

// runWith runs the command on input and returns its status, stdout and
// stderr.
func runWith(t *testing.T, input string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status := run(args, strings.NewReader(input), &out, &errOut)
	return status, out.String(), errOut.String()
}

// figureLines returns the FIGURE lines of an output.
func figureLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FIGURE ") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestRunReportsTheMedianOfRepeatedCounts(t *testing.T) {
	// -count 5 of a benchmark whose last run was a stall: the last value
	// would have been the figure.
	var in strings.Builder
	for _, v := range []string{"100", "104", "98", "103", "40"} {
		in.WriteString("BenchmarkA-2 \t 1 \t 5 ns/op \t " + v + " fig:a_msgs_s\n")
	}
	in.WriteString("PASS\n")
	status, out, _ := runWith(t, in.String())
	require.Zero(t, status)
	require.Equal(t, []string{"FIGURE a_msgs_s 100"}, figureLines(out))
}

func TestRunFailsWhenAWantedFigureIsMissing(t *testing.T) {
	in := "BenchmarkA-2 \t 1 \t 5 ns/op \t 7 fig:a_ms\nPASS\n"
	status, out, errOut := runWith(t, in, "-want", "a_ms,b_ms c_ms")
	require.Equal(t, 1, status)
	require.Contains(t, errOut, "lacks 2 expected figure(s): b_ms, c_ms")
	require.Equal(t, []string{"FIGURE a_ms 7"}, figureLines(out), "what was measured is still printed")

	status, _, errOut = runWith(t, in, "-want", "a_ms")
	require.Zero(t, status, errOut)
	status, _, errOut = runWith(t, in)
	require.Zero(t, status, "without -want any figure will do: %s", errOut)
}

func TestRunFailsOnAFailedOrEmptyRun(t *testing.T) {
	status, _, errOut := runWith(t, "BenchmarkA-2 \t 1 \t 5 ns/op \t 7 fig:a_ms\n--- FAIL: BenchmarkB\nFAIL\n")
	require.Equal(t, 1, status)
	require.Contains(t, errOut, "the benchmark run failed")

	status, _, errOut = runWith(t, "PASS\n")
	require.Equal(t, 1, status)
	require.Contains(t, errOut, "no figures in the input")
}

func TestRunRefusesArguments(t *testing.T) {
	status, _, errOut := runWith(t, "", "a_ms")
	require.Equal(t, 2, status)
	require.Contains(t, errOut, "unexpected arguments")
}
