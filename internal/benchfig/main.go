// Command benchfig turns `go test -bench` output into the figure lines that
// the make targets end with.
//
// A benchmark publishes a figure by reporting a metric whose unit starts with
// "fig:", for example
//
//	b.ReportMetric(msgsPerSec, "fig:store_append_msgs_s")
//
// benchfig copies its input to its output unchanged (so a person still sees
// the whole run) and then prints, once every input line has been read, one
// line per figure:
//
//	FIGURE store_append_msgs_s 123456
//
// in the order the figures first appeared. When a benchmark runs several
// times (-count), the last value wins. It exits non-zero when the input holds
// a FAIL line or no figure at all, so a broken benchmark cannot pass as a run
// with nothing to report.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

const unitPrefix = "fig:"

type figures struct {
	order  []string
	values map[string]float64
	failed bool
}

// scan reads bench output from r, echoes it to w and collects the figures.
func scan(r io.Reader, w io.Writer) (*figures, error) {
	f := &figures{values: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") {
			f.failed = true
		}
		fields := strings.Fields(line)
		for i := 1; i < len(fields); i++ {
			unit := fields[i]
			if !strings.HasPrefix(unit, unitPrefix) {
				continue
			}
			v, err := strconv.ParseFloat(fields[i-1], 64)
			if err != nil {
				continue
			}
			name := strings.TrimPrefix(unit, unitPrefix)
			if _, seen := f.values[name]; !seen {
				f.order = append(f.order, name)
			}
			f.values[name] = v
		}
	}
	return f, sc.Err()
}

// format prints a figure without exponent notation and with at most three
// decimals, dropping trailing zeros.
func format(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func main() {
	f, err := scan(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchfig:", err)
		os.Exit(1)
	}
	for _, name := range f.order {
		fmt.Printf("FIGURE %s %s\n", name, format(f.values[name]))
	}
	switch {
	case f.failed:
		fmt.Fprintln(os.Stderr, "benchfig: the benchmark run failed")
		os.Exit(1)
	case len(f.order) == 0:
		fmt.Fprintln(os.Stderr, "benchfig: no figures in the input")
		os.Exit(1)
	}
}
