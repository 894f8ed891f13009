package lane

import (
	"errors"
	"fmt"
	"strings"
)

// Limits of a lane name. They keep a lane small enough to ride in a message
// property on every message (RocketMQ caps all user properties of a message
// together at 16 KiB) and to serve as a metric label without blowing up
// cardinality by accident.
const (
	// MaxSegmentLength is the longest segment, in bytes.
	MaxSegmentLength = 32
	// MaxDepth is the largest number of segments, so a message falls back
	// through at most MaxDepth steps before reaching base.
	MaxDepth = 8
	// MaxLength is the longest whole name, dots included, in bytes.
	MaxLength = 128
	// Base is the name of the base lane: the empty string.
	Base = ""
)

// ErrMalformedLane is wrapped by every error about a lane name that breaks
// the rules of this package.
var ErrMalformedLane = errors.New("lane: malformed lane name")

// Validate reports whether name is a well-formed lane name. The empty string
// is the base lane and is valid. Errors wrap ErrMalformedLane and say which
// rule broke. Validate does not allocate for a valid name.
func Validate(name string) error {
	_, err := depth(name)
	return err
}

// Parse splits a lane name into its segments, validating it. The base lane
// yields no segments. Errors wrap ErrMalformedLane.
func Parse(name string) ([]string, error) {
	if _, err := depth(name); err != nil || name == Base {
		return nil, err
	}
	return strings.Split(name, "."), nil
}

// depth validates name and counts its segments.
func depth(name string) (int, error) {
	if name == Base {
		return 0, nil
	}
	if len(name) > MaxLength {
		return 0, fmt.Errorf("lane %.40q...: %d bytes, more than %d: %w", name, len(name), MaxLength, ErrMalformedLane)
	}
	n := 0
	for rest := name; ; {
		seg, tail, more := strings.Cut(rest, ".")
		n++
		if n > MaxDepth {
			return 0, fmt.Errorf("lane %q: more than %d segments: %w", name, MaxDepth, ErrMalformedLane)
		}
		if err := validSegment(seg); err != nil {
			return 0, fmt.Errorf("lane %q: segment %d %q %s: %w", name, n, seg, err.Error(), ErrMalformedLane)
		}
		if !more {
			return n, nil
		}
		rest = tail
	}
}

// segmentError is a reason, not a wrapped error: Parse wraps the sentinel.
type segmentError string

func (e segmentError) Error() string { return string(e) }

func validSegment(s string) error {
	if s == "" {
		return segmentError("is empty (leading, trailing or doubled dot)")
	}
	if len(s) > MaxSegmentLength {
		return segmentError(fmt.Sprintf("is longer than %d bytes", MaxSegmentLength))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		case c == '_' || c == '-':
			return segmentError("must start with a lower-case letter or a digit")
		default:
			return segmentError(fmt.Sprintf("has byte %q at %d; allowed are a-z, 0-9, '_' and '-'", c, i))
		}
	}
	return nil
}

// Chain returns the fallback chain of a lane, most specific first and base
// last: Chain("a.x.y") is ["a.x.y", "a.x", "a", ""]. Chain("") is [""]. A
// malformed name has no place in the lane tree, so its chain is base alone
// (see the package doc for why a malformed lane goes to base).
func Chain(name string) []string {
	segs, err := Parse(name)
	if err != nil || len(segs) == 0 {
		return []string{Base}
	}
	out := make([]string, 0, len(segs)+1)
	for end := len(name); ; {
		out = append(out, name[:end])
		i := strings.LastIndexByte(name[:end], '.')
		if i < 0 {
			break
		}
		end = i
	}
	return append(out, Base)
}

// Parent returns the lane one step up the chain: Parent("a.x") is "a",
// Parent("a") is base. ok is false for base, which has no parent, and for a
// malformed name.
func Parent(name string) (parent string, ok bool) {
	if name == Base || Validate(name) != nil {
		return "", false
	}
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i], true
	}
	return Base, true
}

// Depth is the number of segments: 0 for base, 1 for "a", 2 for "a.x". A
// malformed name has depth -1.
func Depth(name string) int {
	n, err := depth(name)
	if err != nil {
		return -1
	}
	return n
}

// IsAncestor reports whether anc is on the fallback chain of name (a lane is
// its own ancestor, and base is everyone's).
func IsAncestor(anc, name string) bool {
	for _, l := range Chain(name) {
		if l == anc {
			return true
		}
	}
	return false
}
