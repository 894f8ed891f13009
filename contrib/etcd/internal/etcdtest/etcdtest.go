// Package etcdtest runs a one-member etcd in process for tests, with a TCP
// proxy in front of it that can cut the clients off (a partition) and let
// them back, and a way to stop and restart the server on its data or on an
// empty one.
package etcdtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is an embedded etcd member on loopback.
type Server struct {
	dir        string
	clientPort int
	peerPort   int
	gen        int // data directory generation: RestartEmpty starts a new one

	mu   sync.Mutex
	etcd *embed.Etcd
}

// Start starts a member in a temporary directory of t and stops it when
// the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartDir(t.TempDir())
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartDir starts a member whose data lives under dir. Stop it with Stop.
func StartDir(dir string) (*Server, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, clientPort: cp, peerPort: pp}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "twinmq-test"
	cfg.Dir = filepath.Join(s.dir, fmt.Sprintf("data-%d", s.gen))
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", s.peerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// Short ticks: leases of one second, and quick elections after a
	// restart.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	var (
		e   *embed.Etcd
		err error
	)
	// The ports were free when picked, and a restart takes the same ones
	// back: retry briefly while the old listener is let go.
	for i := 0; ; i++ {
		e, err = embed.StartEtcd(cfg)
		if err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("etcdtest: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("etcdtest: the member did not become ready")
	}
	s.mu.Lock()
	s.etcd = e
	s.mu.Unlock()
	return nil
}

// Endpoint is the member's client address, "127.0.0.1:port".
func (s *Server) Endpoint() string { return fmt.Sprintf("127.0.0.1:%d", s.clientPort) }

// Stop stops the member (as a crash would, for its clients). It may be
// called more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	e := s.etcd
	s.etcd = nil
	s.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Restart starts the member again on the same port and data.
func (s *Server) Restart() error {
	s.Stop()
	return s.start()
}

// RestartEmpty starts the member again on the same port with no data, as
// an etcd rebuilt from nothing: every key, lease and revision is gone.
func (s *Server) RestartEmpty() error {
	s.Stop()
	s.gen++
	return s.start()
}

// Client returns a client of endpoints, closed when the test ends. Its
// keepalive notices a dead connection within about two seconds.
func Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(ClientConfig(endpoints...))
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// ClientConfig is the client configuration the tests use.
func ClientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	}
}

// Proxy forwards TCP connections to a target and can cut them all.
type Proxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on loopback and forwards to target until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.pipe(c)
	}
}

func (p *Proxy) pipe(c net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = up.Close()
		p.drop(c)
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
	p.drop(c)
	p.drop(up)
}

func (p *Proxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
