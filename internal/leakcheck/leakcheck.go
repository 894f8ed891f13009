// Package leakcheck fails a test run that leaves goroutines behind.
//
// The project's rule is that every goroutine has an owner whose Close waits
// for it. A package that starts goroutines holds itself to that rule with
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
//
// which runs the tests and then waits, polling and for a bounded time, until
// every goroutine started during the run has ended. A goroutine still alive
// at the end fails the run (non-zero exit) and its stack is printed. Check
// does the same for a single, non-parallel test.
//
// Decisions:
//
//   - Only goroutines created during the run count: those alive before the
//     tests started (started by package init, by the runtime) are no
//     business of the tests. Goroutine ids are never reused, so a snapshot
//     of ids taken before is exact.
//   - The runtime's own goroutines, the testing package's, and the
//     os/signal loop are ignored: they are not started by the code under
//     test and end with the process.
//   - Third-party goroutines are not ignored. A gRPC connection or server
//     that was never closed shows up as gRPC goroutines only: their "created
//     by" line names a gRPC function, and the goroutine that called into gRPC
//     (ours) is usually gone. In a test binary nothing else runs, so a
//     goroutine created during the run was created on our behalf; the report
//     follows each leaked goroutine's "created by ... in goroutine N" chain
//     through the goroutines still alive and prints the first frame of this
//     module it finds, to point at the owner who forgot to close it. A pool
//     that a library really keeps for the process can be ignored by name
//     with IgnoreCreatedBy; none is needed today.
//   - The check runs only when the tests passed: a failing test may stop
//     halfway, before its Close, and its failure is the message that matters.
//   - Waiting is bounded (5 s by default, WithTimeout to change it) and
//     polls, so a run without leaks pays one stack dump and no sleep, and a
//     Close that returns before the last goroutine has quite exited does not
//     fail the run.
//
// Nothing here is package-level state: each call snapshots and compares on
// its own.
package leakcheck

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// modulePrefix is the import path prefix of this module's functions in a
// stack trace.
const modulePrefix = "github.com/twinmq/twinmq/"

// Option tunes a check.
type Option func(*options)

type options struct {
	timeout   time.Duration
	ignore    []string
	out       io.Writer
	exit      func(int)
	afterTest func() // test hook: runs after m.Run, before the check
}

// WithTimeout bounds how long the check waits for goroutines to end
// (default 5 s).
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// IgnoreCreatedBy ignores goroutines whose "created by" function starts with
// prefix (for example "go.opencensus.io/stats/view.init"). Use it only for a
// pool a library keeps for the life of the process, never for goroutines of
// this module.
func IgnoreCreatedBy(prefix string) Option {
	return func(o *options) { o.ignore = append(o.ignore, prefix) }
}

func build(opts []Option) options {
	o := options{timeout: 5 * time.Second, out: os.Stderr, exit: os.Exit}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// testingM is the part of *testing.M that VerifyTestMain uses.
type testingM interface{ Run() int }

// VerifyTestMain runs the tests of m and exits. When they passed it then
// waits until no goroutine created during the run is alive; if some still
// are when the wait ends, it prints their stacks and exits with status 1.
func VerifyTestMain(m *testing.M, opts ...Option) {
	o := build(opts)
	o.exit(verify(m, o))
}

func verify(m testingM, o options) int {
	before := ids(snapshot())
	code := m.Run()
	if o.afterTest != nil {
		o.afterTest()
	}
	if code != 0 {
		return code
	}
	if leaked := wait(before, o); len(leaked) > 0 {
		fmt.Fprintf(o.out, "leakcheck: %d goroutine(s) outlived the tests:\n\n%s", len(leaked), report(leaked))
		return 1
	}
	return 0
}

// Check fails t when a goroutine created after the call is still alive
// once t's other cleanups have run (call Check first, so that its cleanup
// runs last, after the Closes the test registered). t must not run in
// parallel with other tests: their goroutines would be counted as its own.
func Check(t testing.TB, opts ...Option) {
	t.Helper()
	o := build(opts)
	before := ids(snapshot())
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if leaked := wait(before, o); len(leaked) > 0 {
			t.Errorf("leakcheck: %d goroutine(s) outlived the test:\n\n%s", len(leaked), report(leaked))
		}
	})
}

// wait polls until no goroutine outside before (and not ignored) is alive,
// or the timeout passes; it returns what is still alive then, and the whole
// snapshot for attribution.
func wait(before map[int]bool, o options) []leak {
	deadline := time.Now().Add(o.timeout)
	pause := time.Millisecond
	for {
		all := snapshot()
		leaked := find(all, before, o.ignore)
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(pause)
		if pause < 100*time.Millisecond {
			pause *= 2
		}
	}
}

// goroutine is one parsed entry of a full stack dump.
type goroutine struct {
	id        int
	state     string
	funcs     []string // function of each frame, innermost first
	createdBy string   // function that ran the go statement, "" if none
	parent    int      // goroutine that ran it, 0 if unknown
	text      string   // the entry as dumped
}

type leak struct {
	g     goroutine
	owner string // first frame of this module on g or its live ancestors
}

func snapshot() []goroutine {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return parse(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

func ids(gs []goroutine) map[int]bool {
	m := make(map[int]bool, len(gs))
	for _, g := range gs {
		m[g.id] = true
	}
	return m
}

// parse splits a runtime.Stack(_, true) dump into goroutines.
func parse(dump []byte) []goroutine {
	var out []goroutine
	for _, block := range bytes.Split(dump, []byte("\n\n")) {
		text := strings.TrimRight(string(block), "\n")
		lines := strings.Split(text, "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		g := goroutine{text: text}
		head := strings.TrimPrefix(lines[0], "goroutine ")
		idText, rest, _ := strings.Cut(head, " ")
		g.id, _ = strconv.Atoi(idText)
		g.state = strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]:")
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "...") {
				continue // file:line of the frame above, or elided frames
			}
			if c, ok := strings.CutPrefix(l, "created by "); ok {
				fn, parent, found := strings.Cut(c, " in goroutine ")
				g.createdBy = fn
				if found {
					g.parent, _ = strconv.Atoi(parent)
				}
				continue
			}
			g.funcs = append(g.funcs, funcName(l))
		}
		out = append(out, g)
	}
	return out
}

// funcName strips the argument list from a frame line:
// "pkg.(*T).m(0x1, ...)" gives "pkg.(*T).m".
func funcName(line string) string {
	if i := strings.LastIndex(line, "("); i > 0 && strings.HasSuffix(line, ")") {
		return line[:i]
	}
	return line
}

func find(all []goroutine, before map[int]bool, ignore []string) []leak {
	self := currentID()
	byID := make(map[int]goroutine, len(all))
	for _, g := range all {
		byID[g.id] = g
	}
	var out []leak
	for _, g := range all {
		if before[g.id] || g.id == self || ignored(g, ignore) {
			continue
		}
		out = append(out, leak{g: g, owner: owner(g, byID, self)})
	}
	return out
}

// ignored reports goroutines of the runtime, the testing package, the
// signal loop, and those the caller named. (The goroutine that takes the
// snapshot is left out by id.)
func ignored(g goroutine, ignore []string) bool {
	for _, p := range ignore {
		if strings.HasPrefix(g.createdBy, p) {
			return true
		}
	}
	switch {
	case strings.HasPrefix(g.createdBy, "testing."),
		strings.HasPrefix(g.createdBy, "os/signal."),
		strings.HasPrefix(g.createdBy, "runtime."),
		g.createdBy == "" && len(g.funcs) > 0 && strings.HasPrefix(g.funcs[len(g.funcs)-1], "runtime."):
		return true
	}
	return false
}

// owner names the first frame of this module on g, on its creator, or on
// the creator's live ancestors; "" when the chain leaves only dead
// goroutines, or reaches self (the checker, whose frames would name
// nobody useful).
func owner(g goroutine, byID map[int]goroutine, self int) string {
	seen := map[int]bool{}
	for {
		for _, f := range g.funcs {
			if ours(f) {
				return f
			}
		}
		if ours(g.createdBy) {
			return g.createdBy
		}
		p, ok := byID[g.parent]
		if !ok || p.id == self || seen[p.id] {
			return ""
		}
		seen[p.id] = true
		g = p
	}
}

func ours(fn string) bool {
	return strings.HasPrefix(fn, modulePrefix)
}

func report(leaked []leak) string {
	var b strings.Builder
	for _, l := range leaked {
		switch {
		case l.owner != "":
			fmt.Fprintf(&b, "owned by %s:\n", l.owner)
		default:
			fmt.Fprintf(&b, "created by %s in goroutine %d (no longer alive; look for a Close that was not called):\n", l.g.createdBy, l.g.parent)
		}
		b.WriteString(l.g.text)
		b.WriteString("\n\n")
	}
	return b.String()
}

func currentID() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	head := strings.TrimPrefix(string(buf), "goroutine ")
	idText, _, _ := strings.Cut(head, " ")
	id, _ := strconv.Atoi(idText)
	return id
}
