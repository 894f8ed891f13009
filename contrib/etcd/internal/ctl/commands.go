package ctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
)

func (a *app) validateFlags(_ *flag.FlagSet, _ *globals) func(context.Context, []string) int {
	return func(_ context.Context, args []string) int {
		data, name, code := a.readDocument(args[0])
		if code != exitOK {
			return code
		}
		if _, ok := a.check(name, data, a.stdout); !ok {
			return exitInvalid
		}
		fmt.Fprintf(a.stderr, "%s: valid\n", name)
		return exitOK
	}
}

func (a *app) getFlags(fs *flag.FlagSet, g *globals) func(context.Context, []string) int {
	revOnly := fs.Bool("revision-only", false, "print only the mod revision, on stdout")
	out := fs.String("o", "", "write the document to this file (mode 0600) and print only the mod revision on stdout")
	return func(ctx context.Context, _ []string) int {
		if *revOnly && *out != "" {
			return a.fail(exitUsage, "-revision-only and -o exclude each other")
		}
		s, code := a.connect(ctx, g)
		if code != exitOK {
			return code
		}
		defer s.close()
		kv, code := s.read()
		if code != exitOK {
			return code
		}
		switch {
		case *revOnly:
			fmt.Fprintln(a.stdout, kv.ModRevision)
		case *out != "":
			if err := os.WriteFile(*out, kv.Value, 0o600); err != nil {
				return a.fail(exitUsage, "%v", err)
			}
			fmt.Fprintln(a.stdout, kv.ModRevision)
		default:
			if _, err := a.stdout.Write(kv.Value); err != nil {
				return a.fail(exitUsage, "writing the document: %v", err)
			}
			fmt.Fprintf(a.stderr, "revision %d\n", kv.ModRevision)
		}
		return exitOK
	}
}

func (a *app) putFlags(fs *flag.FlagSet, g *globals) func(context.Context, []string) int {
	ifRev := fs.Int64("if-revision", 0, "write only if the key is still at this mod revision (from get); default: the one put reads itself")
	create := fs.Bool("create", false, "publish the key's first document: write only if the key holds none")
	return func(ctx context.Context, args []string) int {
		revGiven := false
		fs.Visit(func(f *flag.Flag) { revGiven = revGiven || f.Name == "if-revision" })
		switch {
		case revGiven && *create:
			return a.fail(exitUsage, "-if-revision and -create exclude each other")
		case revGiven && *ifRev <= 0:
			return a.fail(exitUsage, "-if-revision must be a revision from get (positive); use -create for a key with no document")
		}
		data, name, code := a.readDocument(args[0])
		if code != exitOK {
			return code
		}
		if _, ok := a.check(name, data, a.stderr); !ok {
			return a.fail(exitInvalid, "%s is invalid: nothing was written", name)
		}
		s, code := a.connect(ctx, g)
		if code != exitOK {
			return code
		}
		defer s.close()
		var cmp clientv3.Cmp
		switch {
		case *create:
			cmp = clientv3.Compare(clientv3.CreateRevision(s.key), "=", 0)
		case revGiven:
			cmp = clientv3.Compare(clientv3.ModRevision(s.key), "=", *ifRev)
		default:
			kv, code := s.read()
			if code == exitNoDocument {
				return a.fail(code, "publish the first document of %s with put -create", s.key)
			}
			if code != exitOK {
				return code
			}
			*ifRev = kv.ModRevision
			if a.afterRead != nil {
				a.afterRead()
			}
			cmp = clientv3.Compare(clientv3.ModRevision(s.key), "=", *ifRev)
		}
		resp, err := s.cli.Txn(s.ctx).If(cmp).Then(clientv3.OpPut(s.key, string(data))).Else(clientv3.OpGet(s.key)).Commit()
		if err != nil {
			return a.fail(exitEtcd, "%s: %v; whether %s was written is unknown: run twinmqctl get", s.where(), s.explain(err), name)
		}
		if !resp.Succeeded {
			var cur *int64
			if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
				cur = &r.Kvs[0].ModRevision
			}
			switch {
			case *create && cur != nil:
				return a.fail(exitConflict, "conflict: %s already holds a document (revision %d); nothing was written: get it, then put -if-revision", s.key, *cur)
			case cur == nil:
				return a.fail(exitConflict, "conflict: someone deleted the document at %s since revision %d; nothing was written", s.key, *ifRev)
			default:
				return a.fail(exitConflict, "conflict: %s is at revision %d, not %d: someone else published since; nothing was written: get and diff, then put again", s.key, *cur, *ifRev)
			}
		}
		fmt.Fprintln(a.stdout, resp.Header.Revision)
		return exitOK
	}
}

func (a *app) diffFlags(_ *flag.FlagSet, g *globals) func(context.Context, []string) int {
	return func(ctx context.Context, args []string) int {
		data, name, code := a.readDocument(args[0])
		if code != exitOK {
			return code
		}
		cur, ok := a.check(name, data, a.stderr)
		if !ok {
			return a.fail(exitInvalid, "%s is invalid: a reload would reject it", name)
		}
		s, code := a.connect(ctx, g)
		if code != exitOK {
			return code
		}
		defer s.close()
		kv, code := s.read()
		if code != exitOK {
			return code
		}
		old, err := config.Parse(kv.Value)
		if err != nil {
			return a.fail(exitInvalid, "the document at %s (revision %d) does not parse, so the running processes keep an older one: %v", s.key, kv.ModRevision, err)
		}
		if err := old.Validate(); err != nil {
			fmt.Fprintf(a.stderr, "twinmqctl: note: the document at %s (revision %d) is invalid, so the running processes keep an older one: %v\n", s.key, kv.ModRevision, err)
		}
		fmt.Fprintf(a.stderr, "%s at revision %d -> %s\n", s.key, kv.ModRevision, name)
		lines := describe(old, cur)
		for _, l := range lines {
			fmt.Fprintln(a.stdout, l)
		}
		if len(lines) == 0 {
			return exitOK
		}
		return exitDiffers
	}
}

// readDocument reads FILE, or stdin for "-", up to one byte beyond the
// largest document, so that Parse reports an oversized one.
func (a *app) readDocument(arg string) (data []byte, name string, code int) {
	var r io.Reader
	name = arg
	if arg == "-" {
		r, name = a.stdin, "<stdin>"
	} else {
		f, err := os.Open(arg)
		if err != nil {
			return nil, name, a.fail(exitUsage, "%v", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, config.MaxDocumentBytes+1))
	if err != nil {
		return nil, name, a.fail(exitUsage, "reading %s: %v", name, err)
	}
	return data, name, exitOK
}

// check parses and validates data as the SDK does, printing every problem
// on w, one per line.
func (a *app) check(name string, data []byte, w io.Writer) (*config.Config, bool) {
	var ve *config.ValidationError
	c, err := config.Parse(data)
	if err != nil {
		// Parse lists what it could not decode by path, with the rules the
		// rest breaks; a document that is not JSON gets its position.
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				fmt.Fprintln(w, p.String())
			}
			return nil, false
		}
		fmt.Fprintf(w, "%s%s: %v\n", name, position(data, err), err)
		return nil, false
	}
	err = c.Validate()
	switch {
	case err == nil:
		return c, true
	case errors.As(err, &ve):
		for _, p := range ve.Problems {
			fmt.Fprintln(w, p.String())
		}
	default:
		fmt.Fprintf(w, "%s: %v\n", name, err)
	}
	return nil, false
}

// position gives ":line:column" of a JSON decoding error, when it has one.
func position(data []byte, err error) string {
	var off int64
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	default:
		return ""
	}
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return ":" + strconv.Itoa(line) + ":" + strconv.Itoa(col)
}

// session is a client of etcd bounded by -timeout.
type session struct {
	a      *app
	cli    *clientv3.Client
	key    string
	ctx    context.Context
	cancel context.CancelFunc
	limit  time.Duration
}

func (a *app) connect(ctx context.Context, g *globals) (*session, int) {
	if g.key == "" {
		return nil, a.fail(exitUsage, "no key: give -key or set $%s", envKey)
	}
	var eps []string
	for e := range strings.SplitSeq(g.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, a.fail(exitUsage, "no etcd endpoint: give -endpoints or set $%s", envEndpoints)
	}
	tc, err := g.tlsConfig()
	if err != nil {
		return nil, a.fail(exitUsage, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: g.timeout,
		TLS:         tc,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		cancel()
		return nil, a.fail(exitEtcd, "etcd at %s: %v", strings.Join(eps, ","), err)
	}
	return &session{a: a, cli: cli, key: g.key, ctx: ctx, cancel: cancel, limit: g.timeout}, exitOK
}

func (s *session) close() {
	_ = s.cli.Close()
	s.cancel()
}

func (s *session) where() string {
	return "etcd at " + strings.Join(s.cli.Endpoints(), ",")
}

// explain names the timeout when it is what ended a call.
func (s *session) explain(err error) string {
	if s.ctx.Err() != nil && errors.Is(s.ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within -timeout %v (%v)", s.limit, err)
	}
	return err.Error()
}

// read gets the key: exitNoDocument when it holds none.
func (s *session) read() (*kvCopy, int) {
	resp, err := s.cli.Get(s.ctx, s.key)
	if err != nil {
		return nil, s.a.fail(exitEtcd, "%s: %s", s.where(), s.explain(err))
	}
	if len(resp.Kvs) == 0 {
		return nil, s.a.fail(exitNoDocument, "no document at %s", s.key)
	}
	return &kvCopy{Value: resp.Kvs[0].Value, ModRevision: resp.Kvs[0].ModRevision}, exitOK
}

type kvCopy struct {
	Value       []byte
	ModRevision int64
}

// tlsConfig is nil without TLS flags.
func (g *globals) tlsConfig() (*tls.Config, error) {
	if g.cacert == "" && g.cert == "" && g.keyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.cacert != "" {
		pem, err := os.ReadFile(g.cacert)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert: no PEM certificate in %s", g.cacert)
		}
	}
	if (g.cert == "") != (g.keyFile == "") {
		return nil, errors.New("-cert and -key-file go together")
	}
	if g.cert != "" {
		pair, err := tls.LoadX509KeyPair(g.cert, g.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert/-key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
