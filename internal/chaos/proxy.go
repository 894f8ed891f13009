package chaos

import (
	"net"
	"sync"
	"time"
)

// A Proxy forwards TCP connections from its loopback address to one
// target and injects network faults into them. Clients know only the
// proxy's address.
type Proxy struct {
	lis    net.Listener
	target string

	mu        sync.Mutex
	conns     map[*link]struct{}
	partition int // > 0: black hole (nested faults count)
	replyLost int // > 0: the server's bytes are dropped and the link closed
	delay     time.Duration
	closed    bool
	stats     ProxyStats

	wg sync.WaitGroup
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	// held: accepted or caught during a partition; it forwards nothing
	// and is closed when the partition heals (a real partition ends in
	// timeouts, the application never sees the bytes of the gap).
	held      bool
	closeOnce sync.Once
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		_ = l.client.Close()
		if l.server != nil {
			_ = l.server.Close()
		}
	})
}

// ProxyStats counts what a proxy did, to show that its faults bit.
type ProxyStats struct {
	// Conns accepted; Held: connections held by a partition (accepted
	// during one or caught by one); DroppedReplies: connections closed
	// because an answer was dropped.
	Conns, Held, DroppedReplies int
}

// Stats returns the counts so far.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{lis: lis, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Close stops the proxy, closes every link and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for l := range p.conns {
		l.close()
	}
	p.mu.Unlock()
	_ = p.lis.Close()
	p.wg.Wait()
}

// Cut closes every open connection at once (both sides see a reset or an
// EOF); new connections are served normally.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.close()
	}
}

// Partition black-holes the proxy in both directions: connections are
// accepted and held, nothing is forwarded, until heal is called; then the
// held connections are closed. Partitions nest.
func (p *Proxy) Partition() (heal func()) {
	p.mu.Lock()
	p.partition++
	for l := range p.conns {
		if !l.held {
			l.held = true
			p.stats.Held++
		}
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.partition--
			if p.partition > 0 {
				return
			}
			for l := range p.conns {
				if l.held {
					l.close()
				}
			}
		})
	}
}

// ReplyLost forwards what clients send but drops what the server sends
// back, closing the connection as soon as an answer is dropped, until
// heal is called: the server acts on requests whose answers never arrive.
func (p *Proxy) ReplyLost() (heal func()) {
	p.mu.Lock()
	p.replyLost++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.replyLost--
			p.mu.Unlock()
		})
	}
}

// Delay adds d to every chunk forwarded either way until heal is called.
func (p *Proxy) Delay(d time.Duration) (heal func()) {
	p.mu.Lock()
	p.delay += d
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.delay -= d
			p.mu.Unlock()
		})
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		l := &link{client: c, held: p.partition > 0}
		p.conns[l] = struct{}{}
		p.stats.Conns++
		if l.held {
			p.stats.Held++
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// state reads what a chunk of l must go through now.
func (p *Proxy) state(l *link) (held, replyLost bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.held, p.replyLost > 0, p.delay
}

func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
		l.close()
	}()
	if held, _, _ := p.state(l); held {
		// Accepted during a partition: never reaches the server.
		drain(l.client)
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	l.server = s
	held := l.held
	p.mu.Unlock()
	if held {
		drain(l.client)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, l.client, s, false) }()
	go func() { defer wg.Done(); p.pump(l, s, l.client, true) }()
	wg.Wait()
}

// drain reads and drops until the connection closes.
func drain(c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

type chunk struct {
	data []byte
	at   time.Time
}

// pump copies src to dst through a queue, so a delay holds each chunk
// for d after it was read without slowing the reading down.
func (p *Proxy) pump(l *link, src, dst net.Conn, reply bool) {
	defer l.close()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		l.close()
		for range q { // the reader ends now that src is closed
		}
	}()
	for c := range q {
		held, lost, delay := p.state(l)
		if delay > 0 {
			time.Sleep(time.Until(c.at.Add(delay)))
			held, lost, _ = p.state(l)
		}
		switch {
		case held:
			continue
		case lost && reply:
			p.mu.Lock()
			p.stats.DroppedReplies++
			p.mu.Unlock()
			return // the answer is dropped and the connection closed
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}
