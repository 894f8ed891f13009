package remoting

import "strconv"

// Version is the version a RocketMQ server writes in the version field of
// its responses: the ordinal of its release in RocketMQ's MQVersion.Version
// enum (V3_0_0_SNAPSHOT is 0, each release after it one more). Brokers and
// name servers started by their own main classes set it; a server that did
// not (a broker started inside another process) writes 0, which says
// nothing.
type Version int32

// Ordinals of the releases the driver cares about (MQVersion.Version).
const (
	VersionUnknown Version = 0
	// V4_9_7 is the last 4.x release; 4.x brokers have no timer, so they
	// store TIMER_DELIVER_MS as a plain property and deliver at once.
	V4_9_7 Version = 407
	// V5_0_0 is the first release whose broker has the timer (arbitrary
	// delivery times, TIMER_DELIVER_MS).
	V5_0_0 Version = 413
	V5_4_0 Version = 493
)

// Known reports whether the server stated a version at all.
func (v Version) Known() bool { return v > VersionUnknown }

// HasTimer reports whether a broker of this version honours an arbitrary
// delivery time (TIMER_DELIVER_MS): 5.0.0 and later. An unknown version
// reports false.
func (v Version) HasTimer() bool { return v >= V5_0_0 }

// String names the releases above; others are shown by ordinal.
func (v Version) String() string {
	switch v {
	case VersionUnknown:
		return "unknown"
	case V4_9_7:
		return "V4_9_7"
	case V5_0_0:
		return "V5_0_0"
	case V5_4_0:
		return "V5_4_0"
	}
	return "version#" + strconv.Itoa(int(v))
}
