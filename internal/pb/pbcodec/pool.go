package pbcodec

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is a mem.BufferPool of power-of-two tiers, 256 B to 16 MiB, that
// hands buffers out as they were left: it does not clear them.
//
// gRPC's own pools clear every buffer they hand out, in case a user of one
// reads bytes it did not write. Every user of this pool overwrites what it
// reads: the codec marshals into a buffer from its start and materializes
// a received message by copying exactly its length, gRPC's framer reads a
// DATA frame's exact length into its buffer, and the transport's write
// buffer sends only what was copied into it. Clearing was therefore pure
// cost, and not a small one: a batched request of 70 KiB cleared its whole
// buffer in the codec and again frame by frame on the way in.
//
// Pass one Pool to the codec (NewWithPool) and to the transport
// (experimental.WithBufferPool on a client, experimental.BufferPool on a
// server) of the same client or server.
//
// A sync.Pool loses what it holds within two garbage collections, and a busy
// client collects every few tens of milliseconds: every time, the next
// requests allocated their buffers anew (a large allocation, which the
// runtime clears). So each tier up to 256 KiB also keeps a few buffers
// aside that outlive collections: at most about 2 MiB in all, for the tiers
// a client or server actually uses.
type Pool struct {
	tiers [numTiers]sync.Pool
	kept  [numTiers]chan *[]byte // nil for tiers above keptMaxBits
}

const (
	minTierBits = 8  // 256 B
	maxTierBits = 24 // 16 MiB
	numTiers    = maxTierBits - minTierBits + 1

	keptMaxBits = 18 // 256 KiB
	keptPerTier = 4
)

var _ mem.BufferPool = (*Pool)(nil)

// HTTP/2 transport sizes for the connections of a driver client and a
// broker server alike. gRPC's defaults suit many small calls: 64 KiB
// flow-control windows that a bandwidth estimator grows by pinging the
// peer, and 32 KiB read and write buffers. A batched SendMessage carries
// tens to hundreds of KiB, and a receive of 32 messages as much: with the
// defaults each such request costs several write and read system calls, a
// window update back from the receiver and now and then a ping and its
// answer. Fixed windows (which turn the estimator off) and buffers that
// hold a whole batch make it one write and one read each way. The windows
// only bound what a peer may send ahead; nothing is allocated for them.
// The write buffer is a connection's own (gRPC's shared write buffer would
// take it from the pool and give it back around every flush).
const (
	StreamWindow = 8 << 20
	ConnWindow   = 16 << 20
	BufferSize   = 256 << 10 // read and write buffer of a connection
)

// NewPool returns an empty pool.
func NewPool() *Pool {
	p := new(Pool)
	for t := range p.kept[:keptMaxBits-minTierBits+1] {
		p.kept[t] = make(chan *[]byte, keptPerTier)
	}
	return p
}

// tierOf returns the index of the smallest tier that holds n bytes, or -1
// when n is above the largest.
func tierOf(n int) int {
	if n <= 1<<minTierBits {
		return 0
	}
	b := bits.Len(uint(n - 1)) // 2^b >= n
	if b > maxTierBits {
		return -1
	}
	return b - minTierBits
}

// Get returns a buffer of length n whose contents are unspecified.
func (p *Pool) Get(n int) *[]byte {
	t := tierOf(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	select {
	case b := <-p.kept[t]: // a nil channel (large tiers) is never ready
		*b = (*b)[:n]
		return b
	default:
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+minTierBits))
	return &b
}

// Put returns a buffer for reuse. A buffer whose capacity is not exactly a
// tier's (one from a plain allocation, or grown elsewhere) is dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	t := tierOf(c)
	if t < 0 || c != 1<<(t+minTierBits) {
		return
	}
	select {
	case p.kept[t] <- b:
	default:
		p.tiers[t].Put(b)
	}
}
