package ctl

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/contrib/etcd/internal/etcdtest"
)

const key = "/twinmq/config/orders-service"

// document is a valid configuration, changed by edit.
func document(t *testing.T, edit func(*config.Config)) string {
	t.Helper()
	cfg := config.Default()
	cfg.Topics = map[string]config.Topic{"orders": {Clusters: []config.Cluster{
		{Name: "dc1", Endpoints: []string{"10.0.0.1:8081"}, Topic: "orders", Weight: 100},
		{Name: "dc2", Endpoints: []string{"10.1.0.1:8081"}, Topic: "orders", Weight: 100, Priority: 1},
	}}}
	cfg.Consumers = map[string]config.Consumer{"billing": {Concurrency: 16, MaxAttempts: 16, Mode: config.ModeDirect}}
	if edit != nil {
		edit(cfg)
	}
	data, err := cfg.Marshal()
	require.NoError(t, err)
	return string(data)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "doc.json")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "stderr:\n" + r.stderr
}

// ctl runs a command line in process with an empty environment.
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	return ctlWith(t, &app{getenv: func(string) string { return "" }}, "", args...)
}

func ctlWith(t *testing.T, a *app, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a.stdin, a.stdout, a.stderr = strings.NewReader(stdin), &out, &errb
	if a.getenv == nil {
		a.getenv = func(string) string { return "" }
	}
	code := a.run(context.Background(), args)
	return result{code, out.String(), errb.String()}
}

// at gives the flags that point a command at srv's key.
func at(srv *etcdtest.Server) []string {
	return []string{"-endpoints", srv.Endpoint(), "-key", key}
}

func args(pre []string, more ...string) []string { return append(append([]string{}, pre...), more...) }

// stored reads the key directly: its value and mod revision, "" and 0
// when absent.
func stored(t *testing.T, srv *etcdtest.Server) (string, int64) {
	t.Helper()
	cli := etcdtest.Client(t, srv.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

func revision(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	require.NoError(t, err, "not a revision: %q", s)
	return n
}

func TestValidateListsEveryProblemWithItsPath(t *testing.T) {
	good := writeFile(t, document(t, nil))
	r := ctl(t, "validate", good)
	require.Equal(t, exitOK, r.code, r)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "valid")

	bad := writeFile(t, document(t, func(c *config.Config) {
		c.Topics["orders"].Clusters[0].Weight = 20000
		c.Topics["orders"].Clusters[1].Endpoints = []string{"10.1.0.1"}
		c.Batching.MaxDelay = config.Duration(5 * time.Second)
		c.Lanes.LeaseTTL = config.Duration(10 * time.Millisecond)
	}))
	r = ctl(t, "validate", bad)
	require.Equal(t, exitInvalid, r.code, r)
	var paths []string
	for l := range strings.Lines(r.stdout) {
		p, _, ok := strings.Cut(l, ": ")
		require.True(t, ok, "a line without a path: %q", l)
		paths = append(paths, p)
	}
	assert.Equal(t, []string{
		"topics.orders.clusters[0].weight",
		"topics.orders.clusters[1].endpoints[0]",
		"batching.maxDelay",
		"lanes.leaseTTL",
	}, paths)

	// stdin, and a document that does not parse: where it breaks.
	r = ctlWith(t, &app{}, "{\n  \"topics\": {},\n  \"batching\": {\"batchMaxBytes\": \"1MiB\"}\n}", "validate", "-")
	require.Equal(t, exitInvalid, r.code, r)
	assert.Contains(t, r.stdout, "batching.batchMaxBytes: ")
	assert.Contains(t, r.stdout, "topics: ", "every problem at once")
	r = ctlWith(t, &app{}, "{\n  \"topics\": {}\n  \"lanes\": {}\n}", "validate", "-")
	require.Equal(t, exitInvalid, r.code, r)
	assert.True(t, strings.HasPrefix(r.stdout, "<stdin>:3:"), r)
	r = ctlWith(t, &app{}, `{"topics": {}, "lanes": {"leaseTTL": 10}}`, "validate", "-")
	require.Equal(t, exitInvalid, r.code, r)
	assert.Contains(t, r.stdout, "lanes.leaseTTL: got the number 10")
	r = ctlWith(t, &app{}, `{"topics": {}, "lanse": {}}`, "validate", "-")
	require.Equal(t, exitInvalid, r.code, r)
	assert.Contains(t, r.stdout, "lanse: unknown field")

	r = ctl(t, "validate", filepath.Join(t.TempDir(), "missing.json"))
	assert.Equal(t, exitUsage, r.code, r)
}

func TestPutGetRoundTrip(t *testing.T) {
	srv := etcdtest.Start(t)
	first := document(t, nil)

	r := ctl(t, args(at(srv), "get")...)
	require.Equal(t, exitNoDocument, r.code, r)
	r = ctl(t, args(at(srv), "put", writeFile(t, first))...)
	require.Equal(t, exitNoDocument, r.code, "put without -create needs a document to compare with\n%s", r)
	assert.Contains(t, r.stderr, "-create")

	r = ctl(t, args(at(srv), "put", "-create", writeFile(t, first))...)
	require.Equal(t, exitOK, r.code, r)
	rev := revision(t, r.stdout)
	val, mod := stored(t, srv)
	assert.Equal(t, first, val, "the file's bytes are stored as they are")
	assert.Equal(t, mod, rev, "put prints the key's new mod revision")

	r = ctl(t, args(at(srv), "get")...)
	require.Equal(t, exitOK, r.code, r)
	assert.Equal(t, first, r.stdout)
	assert.Equal(t, "revision "+strconv.FormatInt(rev, 10)+"\n", r.stderr)

	r = ctl(t, args(at(srv), "get", "-revision-only")...)
	require.Equal(t, exitOK, r.code, r)
	assert.Equal(t, strconv.FormatInt(rev, 10)+"\n", r.stdout)

	out := filepath.Join(t.TempDir(), "current.json")
	r = ctl(t, args(at(srv), "get", "-o", out)...)
	require.Equal(t, exitOK, r.code, r)
	assert.Equal(t, strconv.FormatInt(rev, 10)+"\n", r.stdout)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, first, string(data))

	// -create refuses a key that holds a document.
	second := document(t, func(c *config.Config) { c.Lanes.Enabled = false })
	r = ctl(t, args(at(srv), "put", "-create", writeFile(t, second))...)
	require.Equal(t, exitConflict, r.code, r)
	val, _ = stored(t, srv)
	assert.Equal(t, first, val)

	// By default put compares with the revision it reads itself; flags
	// may follow the file, and the document may come from stdin.
	r = ctlWith(t, &app{}, second, "put", "-", "-endpoints", srv.Endpoint(), "-key", key)
	require.Equal(t, exitOK, r.code, r)
	rev2 := revision(t, r.stdout)
	assert.Greater(t, rev2, rev)
	val, mod = stored(t, srv)
	assert.Equal(t, second, val)
	assert.Equal(t, rev2, mod)
}

// Two operators read the same revision; the first to publish wins, the
// second is refused and the key keeps the first's document.
func TestPutConflictBetweenTwoOperators(t *testing.T) {
	srv := etcdtest.Start(t)
	require.Equal(t, exitOK, ctl(t, args(at(srv), "put", "-create", writeFile(t, document(t, nil)))...).code)

	alice := ctl(t, args(at(srv), "get", "-revision-only")...)
	bob := ctl(t, args(at(srv), "get", "-revision-only")...)
	require.Equal(t, exitOK, alice.code, alice)
	require.Equal(t, alice.stdout, bob.stdout)
	n := strings.TrimSpace(alice.stdout)

	aliceDoc := document(t, func(c *config.Config) { c.Topics["orders"].Clusters[0].Weight = 10 })
	bobDoc := document(t, func(c *config.Config) { c.Lanes.Enabled = false })
	r := ctl(t, args(at(srv), "put", "-if-revision", n, writeFile(t, aliceDoc))...)
	require.Equal(t, exitOK, r.code, r)
	aliceRev := revision(t, r.stdout)

	r = ctl(t, args(at(srv), "put", "-if-revision", n, writeFile(t, bobDoc))...)
	require.Equal(t, exitConflict, r.code, r)
	assert.Contains(t, r.stderr, "someone else published")
	assert.Contains(t, r.stderr, "revision "+strconv.FormatInt(aliceRev, 10)+", not "+n)
	assert.Empty(t, r.stdout)
	val, mod := stored(t, srv)
	assert.Equal(t, aliceDoc, val)
	assert.Equal(t, aliceRev, mod)

	// Bob retries from what is there now.
	r = ctl(t, args(at(srv), "put", "-if-revision", strconv.FormatInt(aliceRev, 10), writeFile(t, bobDoc))...)
	require.Equal(t, exitOK, r.code, r)
	val, _ = stored(t, srv)
	assert.Equal(t, bobDoc, val)
}

// Without -if-revision, a document published between put's read and its
// write is not overwritten either.
func TestPutDefaultComparesWithTheRevisionItRead(t *testing.T) {
	srv := etcdtest.Start(t)
	require.Equal(t, exitOK, ctl(t, args(at(srv), "put", "-create", writeFile(t, document(t, nil)))...).code)
	raw := etcdtest.Client(t, srv.Endpoint())
	other := document(t, func(c *config.Config) { c.Timeouts.Request = config.Duration(2 * time.Second) })
	a := &app{afterRead: func() {
		_, err := raw.Put(context.Background(), key, other)
		require.NoError(t, err)
	}}
	r := ctlWith(t, a, "", args(at(srv), "put", writeFile(t, document(t, func(c *config.Config) { c.Lanes.Enabled = false })))...)
	require.Equal(t, exitConflict, r.code, r)
	val, _ := stored(t, srv)
	assert.Equal(t, other, val)
}

func TestPutRefusesAnInvalidDocument(t *testing.T) {
	srv := etcdtest.Start(t)
	bad := writeFile(t, document(t, func(c *config.Config) { c.Topics["orders"].Clusters[0].Weight = -1 }))

	r := ctl(t, args(at(srv), "put", "-create", bad)...)
	require.Equal(t, exitInvalid, r.code, r)
	assert.Contains(t, r.stderr, "topics.orders.clusters[0].weight: -1 must be in 0..10000")
	val, _ := stored(t, srv)
	assert.Empty(t, val, "nothing was written")

	good := document(t, nil)
	require.Equal(t, exitOK, ctl(t, args(at(srv), "put", "-create", writeFile(t, good))...).code)
	_, before := stored(t, srv)
	for _, extra := range [][]string{nil, {"-if-revision", strconv.FormatInt(before, 10)}} {
		r = ctl(t, args(at(srv), append(append([]string{"put"}, extra...), bad)...)...)
		require.Equal(t, exitInvalid, r.code, r)
		assert.Empty(t, r.stdout)
		val, mod := stored(t, srv)
		assert.Equal(t, good, val)
		assert.Equal(t, before, mod)
	}
}

func TestDiff(t *testing.T) {
	srv := etcdtest.Start(t)
	base := document(t, nil)

	r := ctl(t, args(at(srv), "diff", writeFile(t, base))...)
	require.Equal(t, exitNoDocument, r.code, r)

	r = ctl(t, args(at(srv), "put", "-create", writeFile(t, base))...)
	require.Equal(t, exitOK, r.code, r)
	rev := strings.TrimSpace(r.stdout)

	// The same document, formatted otherwise and with defaults left out:
	// nothing for a reload to change.
	r = ctl(t, args(at(srv), "diff", writeFile(t, `{"topics": {"orders": {"clusters": [
		{"name": "dc1", "endpoints": ["10.0.0.1:8081"]},
		{"name": "dc2", "endpoints": ["10.1.0.1:8081"], "priority": 1}]}},
		"consumers": {"billing": {}}}`))...)
	require.Equal(t, exitOK, r.code, r)
	assert.Empty(t, r.stdout)

	// A weight change and the lane kill switch.
	next := document(t, func(c *config.Config) {
		c.Topics["orders"].Clusters[0].Weight = 10
		c.Lanes.Enabled = false
	})
	r = ctl(t, args(at(srv), "diff", writeFile(t, next))...)
	require.Equal(t, exitDiffers, r.code, r)
	assert.Equal(t, "topic orders: cluster dc1 weight 100 -> 10\nlanes: enabled true -> false\n", r.stdout)
	assert.Contains(t, r.stderr, key+" at revision "+rev)

	// An invalid file is refused, etcd or not.
	r = ctl(t, args(at(srv), "diff", writeFile(t, `{"topics": {}}`))...)
	assert.Equal(t, exitInvalid, r.code, r)

	// A document in etcd that does not parse.
	raw := etcdtest.Client(t, srv.Endpoint())
	_, err := raw.Put(context.Background(), key, `{"topics": `)
	require.NoError(t, err)
	r = ctl(t, args(at(srv), "diff", writeFile(t, next))...)
	assert.Equal(t, exitInvalid, r.code, r)
	assert.Contains(t, r.stderr, "does not parse")
}

// blackhole accepts connections and never answers.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestUnreachableEtcd(t *testing.T) {
	doc := writeFile(t, document(t, nil))
	for name, ep := range map[string]string{"refused": closedPort(t), "silent": blackhole(t)} {
		for _, cmd := range [][]string{{"get"}, {"put", doc}, {"put", "-create", doc}, {"diff", doc}} {
			t.Run(name+" "+strings.Join(slices.DeleteFunc(slices.Clone(cmd), func(s string) bool { return s == doc }), " "), func(t *testing.T) {
				start := time.Now()
				r := ctl(t, args([]string{"-endpoints", ep, "-key", key, "-timeout", "300ms"}, cmd...)...)
				took := time.Since(start)
				require.Equal(t, exitEtcd, r.code, r)
				assert.Contains(t, r.stderr, ep)
				// Generous: a missing bound would wait forever.
				assert.Less(t, took, 5*time.Second)
				if slices.Contains(cmd, "-create") {
					assert.Contains(t, r.stderr, "unknown", "a write that timed out may have been applied")
				}
			})
		}
	}
}

func TestUsage(t *testing.T) {
	doc := writeFile(t, document(t, nil))
	for name, argv := range map[string][]string{
		"no command":           nil,
		"unknown command":      {"publish"},
		"unknown flag":         {"get", "-revison-only"},
		"missing file":         {"validate"},
		"extra argument":       {"validate", doc, doc},
		"create and revision":  {"-key", key, "put", "-create", "-if-revision", "3", doc},
		"revision zero":        {"-key", key, "put", "-if-revision", "0", doc},
		"no key":               {"get"},
		"no endpoint":          {"-endpoints", " , ", "-key", key, "get"},
		"zero timeout":         {"-timeout", "0s", "validate", doc},
		"cert without key":     {"-key", key, "-cert", doc, "get"},
		"unreadable CA":        {"-key", key, "-cacert", filepath.Join(t.TempDir(), "ca.pem"), "get"},
		"CA file without PEM":  {"-key", key, "-cacert", doc, "get"},
		"revision-only and -o": {"-key", key, "get", "-revision-only", "-o", doc},
	} {
		t.Run(name, func(t *testing.T) {
			r := ctl(t, argv...)
			assert.Equal(t, exitUsage, r.code, r)
			assert.NotEmpty(t, r.stderr)
			assert.Empty(t, r.stdout)
		})
	}
}

// Every flag of every command has a line in its -h, and the exit codes
// are listed there.
func TestEveryFlagHasAHelpLine(t *testing.T) {
	r := ctl(t, "-h")
	require.Equal(t, exitOK, r.code, r)
	for _, n := range globalNames {
		assert.Contains(t, r.stdout, "  -"+n+" ", "twinmqctl -h")
	}
	for _, c := range commands() {
		assert.Contains(t, r.stdout, "  "+c.name, "twinmqctl -h lists %s", c.name)
	}
	assert.Contains(t, r.stdout, "5  conflict")
	for _, c := range commands() {
		for _, h := range [][]string{{c.name, "-h"}, {"help", c.name}} {
			r := ctl(t, h...)
			require.Equal(t, exitOK, r.code, r)
			fs, _ := (&app{stderr: io.Discard}).commandFlags(c, &globals{})
			n := 0
			fs.VisitAll(func(f *flag.Flag) {
				n++
				assert.NotEmpty(t, f.Usage, "%s -%s", c.name, f.Name)
				assert.Regexp(t, `(?m)^  -`+f.Name+`( |$)`, r.stdout, "%s -h", c.name)
			})
			assert.GreaterOrEqual(t, n, len(globalNames))
			assert.Contains(t, r.stdout, "6  no document")
		}
	}
}

func TestDefaultsFromTheEnvironment(t *testing.T) {
	srv := etcdtest.Start(t)
	env := map[string]string{envEndpoints: "  " + srv.Endpoint() + " ,", envKey: key}
	a := func() *app { return &app{getenv: func(k string) string { return env[k] }} }
	r := ctlWith(t, a(), "", "put", "-create", writeFile(t, document(t, nil)))
	require.Equal(t, exitOK, r.code, r)
	r = ctlWith(t, a(), "", "get", "-revision-only")
	require.Equal(t, exitOK, r.code, r)
	// A flag wins over the environment.
	r = ctlWith(t, a(), "", "get", "-key", "/elsewhere")
	assert.Equal(t, exitNoDocument, r.code, r)
}

// A command leaves no goroutine of its etcd client behind.
func TestNoGoroutineLeftBehind(t *testing.T) {
	srv := etcdtest.Start(t)
	doc := writeFile(t, document(t, nil))
	require.Equal(t, exitOK, ctl(t, args(at(srv), "put", "-create", doc)...).code)
	require.Equal(t, exitOK, ctl(t, args(at(srv), "get")...).code)
	require.Equal(t, exitOK, ctl(t, args(at(srv), "diff", doc)...).code)
	require.Equal(t, exitEtcd, ctl(t, "-endpoints", blackhole(t), "-key", key, "-timeout", "200ms", "get").code)
	var left []string
	for range 100 {
		if left = clientGoroutines(); len(left) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("goroutines left:\n%s", strings.Join(left, "\n\n"))
}

// clientGoroutines lists the goroutines of etcd and gRPC clients (the
// embedded server has none).
func clientGoroutines() []string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	var out []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, "go.etcd.io/etcd/client/v3.") || strings.Contains(g, "transport.(*http2Client)") || strings.Contains(g, "grpc.(*ClientConn)") {
			out = append(out, g)
		}
	}
	return out
}
