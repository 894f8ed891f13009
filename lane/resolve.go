package lane

import "strings"

// LiveSet answers which lanes of a consumer group have live instances. A
// Snapshot is one; Lanes builds one from names; LiveFunc adapts a function.
type LiveSet interface {
	Live(lane string) bool
}

// LiveFunc adapts a function to LiveSet.
type LiveFunc func(lane string) bool

// Live calls f.
func (f LiveFunc) Live(lane string) bool { return f(lane) }

// LaneSet is a LiveSet made of lane names.
type LaneSet map[string]struct{}

// Lanes builds a LaneSet of the given names.
func Lanes(names ...string) LaneSet {
	s := make(LaneSet, len(names))
	for _, n := range names {
		s[n] = struct{}{}
	}
	return s
}

// Live reports whether lane is in the set.
func (s LaneSet) Live(lane string) bool {
	_, ok := s[lane]
	return ok
}

// Without returns a LiveSet that answers as live does, except that the given
// lanes count as dead. A consumer uses it after every instance of a target
// lane failed to take a forwarded message, to resolve the next fallback level.
func Without(live LiveSet, dead ...string) LiveSet {
	ex := Lanes(dead...)
	return LiveFunc(func(l string) bool { return !ex.Live(l) && live.Live(l) })
}

// Resolve picks the lane that should handle a message tagged msgLane: the
// longest prefix on its fallback chain that has live instances, else base.
// level is the number of steps fallen back: 0 when the message's own lane is
// live (or the message is base), 2 for "a.x.y" landing on "a". A malformed
// msgLane resolves to base at level 0, as if the message had no lane.
//
// Resolve never answers "nowhere": when not even base is live it still
// returns base; Route then tells whether anyone can take the message (see
// the package doc).
func Resolve(msgLane string, live LiveSet) (target string, level int) {
	if _, err := depth(msgLane); err != nil || msgLane == Base {
		return Base, 0
	}
	// Walk up the chain in place (each prefix ending before a dot is the
	// next level), so this per-message call builds no slice.
	for end := len(msgLane); ; {
		if live.Live(msgLane[:end]) {
			return msgLane[:end], level
		}
		level++
		if end = strings.LastIndexByte(msgLane[:end], '.'); end < 0 {
			return Base, level
		}
	}
}

// Action is what a consumer does with a received message.
type Action int

const (
	// Handle: run the handler in this consumer, ack on success.
	Handle Action = iota + 1
	// Forward: send the message to an instance of Decision.Target and ack
	// only after that instance's handler succeeded.
	Forward
	// Hold: no live consumer can take the message (the group has no live
	// base instance). Leave it un-acked so the broker redelivers it later;
	// never drop it. Log and count.
	Hold
)

// String names the action for logs and metric labels.
func (a Action) String() string {
	switch a {
	case Handle:
		return "handle"
	case Forward:
		return "forward"
	case Hold:
		return "hold"
	default:
		return "unknown"
	}
}

// Decision is the full routing answer for one message.
type Decision struct {
	Action Action
	// Target is the lane that should handle the message.
	Target string
	// Level is the number of fallback steps from the message's lane.
	Level int
	// Malformed is set when the message's lane broke the naming rules and
	// was treated as base.
	Malformed bool
}

// Route decides what a consumer in lane self does with a message tagged
// msgLane, given the live lanes of its group. It applies Resolve, then:
// the target is self → Handle; the target is live → Forward; otherwise
// (only possible when the target is base and base is not live) → Hold.
// Liveness is the registry's view, shared by every consumer of the group, so
// two consumers never disagree for long about which lane owns a message. The
// one exception is a base consumer not yet visible in live: Resolve lands on
// base anyway, so it handles the message rather than holding it.
func Route(msgLane, self string, live LiveSet) Decision {
	target, level := Resolve(msgLane, live)
	d := Decision{Target: target, Level: level, Malformed: Validate(msgLane) != nil}
	switch {
	case target == self:
		d.Action = Handle
	case live.Live(target):
		d.Action = Forward
	default:
		d.Action = Hold
	}
	return d
}
