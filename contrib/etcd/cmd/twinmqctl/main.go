// Command twinmqctl publishes the twinmq configuration document to the etcd
// key that producers and consumers follow (etcd.NewSource), and checks a
// document before it goes there.
//
// Usage:
//
//	twinmqctl [flags] COMMAND [flags] [FILE]
//
// Commands:
//
//	validate FILE  check FILE as the SDK does (config.Parse, then Validate)
//	               and print every problem with its path, one per line;
//	               FILE "-" is stdin. No etcd needed.
//	get            print the document at -key on stdout and "revision N"
//	               (its mod revision) on stderr; -revision-only prints just
//	               N; -o FILE writes the document to FILE and prints N.
//	put FILE       validate FILE, then publish it with a compare-and-swap on
//	               the key's mod revision, and print the new revision. The
//	               revision compared is -if-revision N (from an earlier get),
//	               or by default the one put reads itself; -create publishes
//	               the first document of a key that holds none.
//	diff FILE      what a reload would change, from the document at -key to
//	               FILE: topics, clusters (weight, priority, endpoints...),
//	               consumers, credentials, batching, failover, timeouts and
//	               lanes, one change per line.
//
// Flags may come before or after the command. Each has a line in
// "twinmqctl -h" and "twinmqctl COMMAND -h". -endpoints defaults to
// $TWINMQ_ETCD_ENDPOINTS, else 127.0.0.1:2379; -key to $TWINMQ_CONFIG_KEY.
// -timeout (default 5s) bounds the whole conversation with etcd.
// -cacert, -cert and -key-file turn on TLS to etcd.
//
// Exit codes, for scripts:
//
//	0  done (diff: no difference)
//	1  diff found differences
//	2  usage error (unknown flag, missing argument, unreadable file)
//	3  invalid document (FILE; for diff also the one in etcd)
//	4  etcd unreachable within -timeout, or an etcd error
//	5  conflict: someone else published since the revision put compared
//	   against (or, with -create, the key already holds a document);
//	   nothing was written
//	6  no document at the key
//
// An example session of an operator (diff's first line and the
// "revision" lines are on stderr):
//
//	$ export TWINMQ_ETCD_ENDPOINTS=etcd-1:2379,etcd-2:2379
//	$ export TWINMQ_CONFIG_KEY=/twinmq/config/orders-service
//	$ twinmqctl get > orders.json
//	revision 41
//	$ vi orders.json                      # dc1 weight 100 -> 10, lanes off
//	$ twinmqctl validate orders.json
//	orders.json: valid
//	$ twinmqctl diff orders.json
//	/twinmq/config/orders-service at revision 41 -> orders.json
//	topic orders: cluster dc1 weight 100 -> 10
//	lanes: enabled true -> false
//	$ twinmqctl put -if-revision 41 orders.json
//	twinmqctl: conflict: /twinmq/config/orders-service is at revision 44, not 41: someone else published since; nothing was written: get and diff, then put again
//	$ echo $?
//	5
//	$ twinmqctl get > theirs.json         # merge their change into orders.json
//	revision 44
//	$ twinmqctl put -if-revision 44 orders.json
//	45
//
// A document with mistakes lists each, and is never published:
//
//	$ twinmqctl validate bad.json
//	topics.orders.clusters[0].weight: 20000 must be in 0..10000
//	lanes.leaseTTL: 10ms must be at least 100ms (the lease is renewed every third of it)
//	$ echo $?
//	3
//
// A script reads the revision and the document in one call (-o writes the
// file with mode 0600: a document may hold credentials):
//
//	rev=$(twinmqctl get -o current.json) || exit
//	make-next-config < current.json > next.json
//	twinmqctl put -if-revision "$rev" next.json
//	case $? in 0) ;; 5) echo "changed meanwhile, start over";; *) exit 1;; esac
//
// Decisions:
//
//   - put never overwrites a document its user has not seen: the write is
//     an etcd transaction If(ModRevision(key) == rev) Then(Put), so a
//     document published in between makes it fail with code 5, and the
//     key keeps the other document. Without -if-revision the revision is
//     the one put reads just before writing, which only guards that short
//     window; an operator who edited a document from get passes the
//     revision get printed.
//   - put validates before it contacts etcd: an invalid document is never
//     written, since the SDK would reject it anyway and keep its last good
//     one, hiding the mistake until the next restart.
//   - The file's bytes are stored as they are, so get gives back exactly
//     what put was given.
//   - When put's transaction times out, whether it was applied is unknown:
//     the message says so, and get tells.
//   - diff lists what config.Diff finds, in detail down to each cluster's
//     fields; a secret is never printed, only that it changed. A document
//     in etcd that parses but breaks a rule is compared all the same, with
//     a note that the running processes kept an older one; one that does
//     not parse gives code 3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Exit codes; see the package doc.
const (
	exitOK         = 0
	exitDiffers    = 1
	exitUsage      = 2
	exitInvalid    = 3
	exitEtcd       = 4
	exitConflict   = 5
	exitNoDocument = 6
)

// Environment variables giving the defaults of -endpoints and -key.
const (
	envEndpoints = "TWINMQ_ETCD_ENDPOINTS"
	envKey       = "TWINMQ_CONFIG_KEY"
)

const defaultEndpoint = "127.0.0.1:2379"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return a.run(ctx, args)
}

// app is one invocation: its streams and environment, so that tests run
// it in process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// afterRead, when set, runs in put between reading the revision and
	// writing (tests use it to publish in that window).
	afterRead func()
}

// globals are the flags every command accepts.
type globals struct {
	endpoints string
	key       string
	timeout   time.Duration
	cacert    string
	cert      string
	keyFile   string
}

var globalNames = []string{"endpoints", "key", "timeout", "cacert", "cert", "key-file"}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.endpoints, "endpoints", g.endpoints, "etcd endpoints, comma separated; $"+envEndpoints+" if set, else "+defaultEndpoint)
	fs.StringVar(&g.key, "key", g.key, "etcd key of the configuration document; $"+envKey+" if set")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound on the whole conversation with etcd")
	fs.StringVar(&g.cacert, "cacert", g.cacert, "PEM file of the CA that signed etcd's certificate; turns on TLS")
	fs.StringVar(&g.cert, "cert", g.cert, "PEM client certificate for etcd (with -key-file); turns on TLS")
	fs.StringVar(&g.keyFile, "key-file", g.keyFile, "PEM private key of -cert")
}

// command is one subcommand.
type command struct {
	name     string
	synopsis string // arguments after the name
	summary  string // one line for the command list
	help     string // more lines for "COMMAND -h"
	// flags registers the command's own flags and returns the function
	// that runs it with the positional arguments.
	flags func(a *app, fs *flag.FlagSet, g *globals) func(ctx context.Context, args []string) int
	nargs int // positional arguments required
}

func commands() []command {
	return []command{
		{
			name: "validate", synopsis: "FILE", nargs: 1,
			summary: "check FILE (\"-\" is stdin) as the SDK does; no etcd needed",
			help: "Parses and validates FILE as producers and consumers do, and prints every\n" +
				"problem on stdout, one per line, with its path. Exit 0 valid, 3 invalid.",
			flags: (*app).validateFlags,
		},
		{
			name: "get", nargs: 0,
			summary: "print the document at -key and its mod revision",
			help: "Prints the document on stdout as stored and \"revision N\" on stderr.\n" +
				"Exit 6 when the key holds no document.",
			flags: (*app).getFlags,
		},
		{
			name: "put", synopsis: "FILE", nargs: 1,
			summary: "validate FILE, then publish it with a compare-and-swap; prints the new revision",
			help: "Refuses an invalid FILE (exit 3, etcd untouched). Writes only if the key is\n" +
				"still at the revision compared: -if-revision N, or by default the one put\n" +
				"reads itself; -create writes only if the key holds no document. Otherwise\n" +
				"exit 5 and nothing is written. Prints the new revision on stdout.",
			flags: (*app).putFlags,
		},
		{
			name: "diff", synopsis: "FILE", nargs: 1,
			summary: "what a reload would change from the document at -key to FILE",
			help: "Prints one line per change (topics, clusters, consumers, credentials,\n" +
				"batching, failover, timeouts, lanes). Exit 0 no difference, 1 differences.",
			flags: (*app).diffFlags,
		},
	}
}

const exitCodesHelp = `Exit codes:
  0  done (diff: no difference)
  1  diff found differences
  2  usage error
  3  invalid document
  4  etcd unreachable within -timeout, or an etcd error
  5  conflict: someone else published first; nothing written
  6  no document at the key
`

func (a *app) run(ctx context.Context, args []string) int {
	g := &globals{endpoints: a.getenv(envEndpoints), key: a.getenv(envKey), timeout: 5 * time.Second}
	if g.endpoints == "" {
		g.endpoints = defaultEndpoint
	}
	top := flag.NewFlagSet("twinmqctl", flag.ContinueOnError)
	top.SetOutput(a.stderr)
	top.Usage = func() {}
	g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.topUsage(a.stdout, top)
			return exitOK
		}
		fmt.Fprintln(a.stderr, "run twinmqctl -h for help")
		return exitUsage
	}
	rest := top.Args()
	if len(rest) == 0 {
		a.topUsage(a.stderr, top)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		if len(rest) == 0 {
			a.topUsage(a.stdout, top)
			return exitOK
		}
		name, rest = rest[0], []string{"-h"}
	}
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == name })
	if i < 0 {
		fmt.Fprintf(a.stderr, "twinmqctl: unknown command %q; run twinmqctl -h for help\n", name)
		return exitUsage
	}
	c := commands()[i]
	fs, exec := a.commandFlags(c, g)
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.commandUsage(a.stdout, c, fs)
			return exitOK
		}
		fmt.Fprintf(a.stderr, "run twinmqctl %s -h for help\n", c.name)
		return exitUsage
	}
	if len(pos) != c.nargs {
		fmt.Fprintf(a.stderr, "twinmqctl: %s takes %d argument(s), got %d\n", c.name, c.nargs, len(pos))
		a.commandUsage(a.stderr, c, fs)
		return exitUsage
	}
	if g.timeout <= 0 {
		return a.fail(exitUsage, "-timeout must be positive, got %v", g.timeout)
	}
	return exec(ctx, pos)
}

// commandFlags returns the flag set of c (its own flags and the global
// ones) and the function that runs it.
func (a *app) commandFlags(c command, g *globals) (*flag.FlagSet, func(context.Context, []string) int) {
	fs := flag.NewFlagSet("twinmqctl "+c.name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {}
	g.register(fs)
	return fs, c.flags(a, fs, g)
}

// parseInterspersed parses flags that may come after positional arguments
// too ("put doc.json -if-revision 7"); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return pos, nil
		}
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(pos, left...), nil
		}
		pos = append(pos, left[0])
		args = left[1:]
	}
}

func (a *app) topUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, "Usage: twinmqctl [flags] COMMAND [flags] [FILE]\n\n"+
		"Publishes and checks the twinmq configuration document at an etcd key.\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-14s %s\n", strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
	}
	fmt.Fprint(w, "\n"+exitCodesHelp+"\nFlags (before or after the command; \"twinmqctl COMMAND -h\" for its own):\n")
	printFlags(w, fs, func(string) bool { return true })
}

func (a *app) commandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: twinmqctl %s [flags] %s\n\n%s\n%s\n", c.name, c.synopsis, c.summary, c.help)
	own := func(n string) bool { return !slices.Contains(globalNames, n) }
	if hasFlags(fs, own) {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs, own)
	}
	fmt.Fprint(w, "\nGlobal flags:\n")
	printFlags(w, fs, func(n string) bool { return !own(n) })
	fmt.Fprint(w, "\n"+exitCodesHelp)
}

func hasFlags(fs *flag.FlagSet, keep func(string) bool) bool {
	found := false
	fs.VisitAll(func(f *flag.Flag) { found = found || keep(f.Name) })
	return found
}

// printFlags prints the flags keep selects, as flag.PrintDefaults does.
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(string) bool) {
	fs.VisitAll(func(f *flag.Flag) {
		if !keep(f.Name) {
			return
		}
		typ, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if typ != "" {
			line += " " + typ
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch {
		case f.DefValue == "" || f.DefValue == "false" || f.DefValue == "0":
		case typ == "string":
			line += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			line += " (default " + f.DefValue + ")"
		}
		fmt.Fprintln(w, line)
	})
}

// fail prints a message on stderr and returns code.
func (a *app) fail(code int, format string, args ...any) int {
	fmt.Fprintf(a.stderr, "twinmqctl: "+format+"\n", args...)
	return code
}
