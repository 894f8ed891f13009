// Package promreg registers twinmq's Prometheus collectors, in one way for
// the whole module.
//
// Collectors come in two kinds, and a registration of either kind meets
// an earlier one of the same name (prometheus.AlreadyRegisteredError) in
// one of two situations, which this package handles the same way
// everywhere:
//
//   - Shared collectors (Register): one per registry, used by every
//     instance that registers it and told apart by labels: the RocketMQ
//     clients' RPC counters, the failover pickers' weights, the
//     configuration watchers' reload counters, the embedded brokers'
//     request counters. An instance meeting the collector registered
//     before takes that one over; nothing unregisters a shared collector,
//     since another instance may be using it.
//   - An instance's own collectors (Own): the producer's, a consumer's, a
//     batch accumulator's, unregistered by the instance's Close. Taking
//     over an earlier instance's collectors would mix the two instances'
//     series, and the first Close would remove the second's, so a
//     duplicate is refused (ErrDuplicate): two instances on one registry
//     need distinct labels (prometheus.WrapRegistererWith).
//
// Any other failure (the name taken by a collector with other labels or
// help) is refused too, wrapping ErrConflict. The callers wrap both in
// their own package's invalid-configuration sentinel.
package promreg

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrDuplicate: an instance's own collectors are already registered by
	// another instance on the same registry.
	ErrDuplicate = errors.New("metrics already registered by another instance; give each its own labels (prometheus.WrapRegistererWith)")
	// ErrConflict: a collector cannot be registered, e.g. its name is
	// taken by one with other labels or help.
	ErrConflict = errors.New("metrics cannot be registered")
)

// Register registers the shared collector c on reg, or returns the
// collector of the same description registered before (by this or another
// instance). A nil reg registers nothing and returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("%w: %w", ErrConflict, err)
}

// Set is the collectors one instance registered with Own.
type Set struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

// Own registers an instance's own collectors on reg, all or none: a
// collector already registered (by another instance) fails with
// ErrDuplicate, any other failure with ErrConflict, and the collectors
// registered before the failure are unregistered again. A nil reg
// registers nothing (the Set's Unregister does nothing either).
func Own(reg prometheus.Registerer, cs ...prometheus.Collector) (*Set, error) {
	s := &Set{reg: reg}
	if reg == nil {
		return s, nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			s.Unregister()
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, ErrDuplicate
			}
			return nil, fmt.Errorf("%w: %w", ErrConflict, err)
		}
		s.mu.Lock()
		s.cs = append(s.cs, c)
		s.mu.Unlock()
	}
	return s, nil
}

// Unregister removes the collectors of the Set from their registry. It is
// safe on a nil Set and may be called more than once, concurrently too.
func (s *Set) Unregister() {
	if s == nil || s.reg == nil {
		return
	}
	s.mu.Lock()
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	for _, c := range cs {
		s.reg.Unregister(c)
	}
}
