// Package ctl is twinmqctl: validate, get, put and diff of the
// configuration document at an etcd key. The command's doc (go doc
// github.com/twinmq/twinmq/contrib/etcd/cmd/twinmqctl) says how to use it;
// Run is here, apart from main, so that tests and the fleet harness run
// it in process.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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

// Run executes one command line (the arguments after the program name)
// and returns its exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
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
