package lane

import (
	"context"
	"fmt"
)

// PropertyLane is the message property that carries a message's lane. It is
// lower-case with a "twinmq_" prefix, so it can never collide with the
// upper-case keys RocketMQ reserves (KEYS, TAGS, UNIQ_KEY, ...) nor with the
// proxy's own "__"-prefixed ones. An absent or empty property means base.
const PropertyLane = "twinmq_lane"

// PropertyKeys lists every message property this package owns, so a producer
// can refuse them as user properties and a tool can strip them. It returns a
// fresh slice on each call.
func PropertyKeys() []string { return []string{PropertyLane, PropertyShadow} }

// ctxKey names the values this package keeps in a context. Each routing
// value (the lane, the shadow mark) gets its own key
// and its own With/From pair, so one can be set without disturbing another
// and Inject/Extract stay the single place that maps them to properties.
type ctxKey int

const (
	laneKey ctxKey = iota
	shadowKey
)

// WithLane returns a copy of ctx that carries the lane name. WithLane(ctx, "")
// marks the request as base explicitly, hiding any lane of a parent context.
// The name is not checked here (a context has no error path); Inject and the
// producer check it when the lane is about to leave the process.
func WithLane(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, laneKey, name)
}

// FromContext returns the lane carried by ctx; ok is false when no lane was
// set, which callers treat as base.
func FromContext(ctx context.Context) (name string, ok bool) {
	name, ok = ctx.Value(laneKey).(string)
	return name, ok
}

// Inject writes the routing values of ctx into a message's properties and
// returns the map (allocated when props is nil and something must be
// written). A lane of ctx is stored under PropertyLane; an explicit base
// lane removes the property; a context without a lane leaves props alone.
// The shadow mark is stored as PropertyShadow=ShadowValue; an explicit
// production mark (WithShadow(ctx, false)) removes the property; a context
// without a mark leaves it alone. A malformed lane is refused with an error
// wrapping ErrMalformedLane and props untouched, so a bad lane never
// reaches the wire.
func Inject(ctx context.Context, props map[string]string) (map[string]string, error) {
	name, ok := FromContext(ctx)
	if ok {
		if err := Validate(name); err != nil {
			return props, err
		}
	}
	set := func(k, v string) {
		if props == nil {
			props = make(map[string]string, 2)
		}
		props[k] = v
	}
	switch {
	case ok && name == Base:
		delete(props, PropertyLane)
	case ok:
		set(PropertyLane, name)
	}
	switch on, marked := shadowOf(ctx); {
	case marked && on:
		set(PropertyShadow, ShadowValue)
	case marked:
		delete(props, PropertyShadow)
	}
	return props, nil
}

// Extract is the receiving side of Inject: it returns ctx carrying the lane
// found in a received message's properties (base when absent) and the
// shadow mark (production unless PropertyShadow is ShadowValue: any other
// value is not a mark, so a stray property cannot turn production traffic
// into shadow traffic by accident, nor the reverse). A malformed
// lane yields a context carrying base together with an error wrapping
// ErrMalformedLane: the message is still routed and handled as base (see
// the package doc), and the caller logs and counts the error.
func Extract(ctx context.Context, props map[string]string) (context.Context, error) {
	ctx = WithShadow(ctx, props[PropertyShadow] == ShadowValue)
	name := props[PropertyLane]
	if err := Validate(name); err != nil {
		return WithLane(ctx, Base), fmt.Errorf("property %s: %w", PropertyLane, err)
	}
	return WithLane(ctx, name), nil
}
