package lane

import "context"

// PropertyShadow is the message property that marks shadow (stress-test)
// traffic. Its value is ShadowValue; an absent property means production
// traffic. A value other than ShadowValue is not a mark (see Extract).
const PropertyShadow = "twinmq_shadow"

// ShadowValue is the value of PropertyShadow on a shadow message.
const ShadowValue = "1"

// WithShadow returns a copy of ctx marked as shadow traffic (on) or, with
// on false, explicitly as production traffic, hiding a mark of a parent
// context. The mark is orthogonal to the lane: a request can be shadow and
// in lane "a.x" at once, and setting one never touches the other.
func WithShadow(ctx context.Context, on bool) context.Context {
	return context.WithValue(ctx, shadowKey, on)
}

// IsShadow reports whether ctx carries the shadow mark. A context without
// any mark is production traffic.
func IsShadow(ctx context.Context) bool {
	on, _ := ctx.Value(shadowKey).(bool)
	return on
}

// shadowOf reads the mark of ctx: set is false when no WithShadow applies.
func shadowOf(ctx context.Context) (on, set bool) {
	on, set = ctx.Value(shadowKey).(bool)
	return on, set
}
