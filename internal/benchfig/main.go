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
// in the order the figures first appeared.
//
// Decisions:
//
//   - A figure seen several times (a benchmark run with -count, or a target
//     that runs a benchmark twice) is reported as the median of its values:
//     the last value would be whichever run happened to come last, and one
//     stalled run on a shared machine would become the figure. With an even
//     number of values the median is the mean of the two middle ones.
//   - Each make target names the figures it promises with -want (names
//     separated by commas or spaces). A run that lacks any of them fails,
//     naming the missing ones: a benchmark that was skipped, renamed or
//     filtered out by a -bench pattern must not pass as a shorter report.
//     Figures beyond the wanted ones are printed as well.
//   - The run also fails when the input holds a FAIL line, or no figure at
//     all, so a broken benchmark cannot pass as a run with nothing to
//     report.
//
// The FIGURE lines are printed before any failure is reported, so a failed
// run still shows what it measured.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

const unitPrefix = "fig:"

type figures struct {
	order  []string
	values map[string][]float64
	failed bool
}

// scan reads bench output from r, echoes it to w and collects the figures.
func scan(r io.Reader, w io.Writer) (*figures, error) {
	f := &figures{values: map[string][]float64{}}
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
			f.values[name] = append(f.values[name], v)
		}
	}
	return f, sc.Err()
}

// value is the figure reported for name: the median of its values.
func (f *figures) value(name string) float64 {
	return median(f.values[name])
}

// missing lists the wanted names that the run did not report, in the order
// they were wanted.
func (f *figures) missing(want []string) []string {
	var out []string
	for _, name := range want {
		if len(f.values[name]) == 0 {
			out = append(out, name)
		}
	}
	return out
}

// median of vs (which it does not modify); the mean of the two middle values
// for an even count; 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// parseWant splits a -want value at commas and white space.
func parseWant(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n'
	})
}

// format prints a figure without exponent notation and with at most three
// decimals, dropping trailing zeros.
func format(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// run is main without the process: it returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wantFlag := fs.String("want", "", "figures the run must report, separated by commas or spaces")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "benchfig: unexpected arguments %q (it reads the benchmark output from stdin)\n", fs.Args())
		return 2
	}
	f, err := scan(stdin, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "benchfig:", err)
		return 1
	}
	for _, name := range f.order {
		fmt.Fprintf(stdout, "FIGURE %s %s\n", name, format(f.value(name)))
	}
	status := 0
	if f.failed {
		fmt.Fprintln(stderr, "benchfig: the benchmark run failed")
		status = 1
	}
	if missing := f.missing(parseWant(*wantFlag)); len(missing) > 0 {
		fmt.Fprintf(stderr, "benchfig: the run lacks %d expected figure(s): %s\n", len(missing), strings.Join(missing, ", "))
		status = 1
	}
	if len(f.order) == 0 {
		fmt.Fprintln(stderr, "benchfig: no figures in the input")
		status = 1
	}
	return status
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
