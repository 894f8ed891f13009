package lane

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResolve(t *testing.T) {
	live := Lanes("", "a", "a.x")
	cases := []struct {
		msg    string
		target string
		level  int
	}{
		{"a.x", "a.x", 0},
		{"a.y", "a", 1},
		{"a", "a", 0},
		{"b", "", 1},
		{"", "", 0},
		{"a.x.y", "a.x", 1},
		{"a.x.y.z", "a.x", 2},
		{"a.y.z", "a", 2},
		{"c.d.e", "", 3},
		{"A.x", "", 0}, // malformed: as if untagged
		{"a..x", "", 0},
	}
	for _, c := range cases {
		target, level := Resolve(c.msg, live)
		assert.Equal(t, c.target, target, "target of %q", c.msg)
		assert.Equal(t, c.level, level, "level of %q", c.msg)
	}
}

func TestResolveDeepChain(t *testing.T) {
	deep := "l1.l2.l3.l4.l5.l6.l7.l8"
	target, level := Resolve(deep, Lanes("", "l1.l2"))
	assert.Equal(t, "l1.l2", target)
	assert.Equal(t, 6, level)
	target, level = Resolve(deep, Lanes(deep))
	assert.Equal(t, deep, target)
	assert.Equal(t, 0, level)
	target, level = Resolve(deep, Lanes())
	assert.Equal(t, "", target, "nothing live still answers base")
	assert.Equal(t, 8, level)
}

func TestResolveNeverPicksSibling(t *testing.T) {
	target, _ := Resolve("a.y", Lanes("", "a.x"))
	assert.Equal(t, "", target)
}

func TestWithoutCountsLanesDead(t *testing.T) {
	live := Lanes("", "a", "a.x")
	target, level := Resolve("a.x", Without(live, "a.x"))
	assert.Equal(t, "a", target)
	assert.Equal(t, 1, level)
	target, level = Resolve("a.x", Without(live, "a.x", "a"))
	assert.Equal(t, "", target)
	assert.Equal(t, 2, level)
}

func TestRoute(t *testing.T) {
	live := Lanes("", "a", "a.x")
	cases := []struct {
		msg, self string
		want      Decision
	}{
		{"a.x", "a.x", Decision{Action: Handle, Target: "a.x"}},
		{"a.x", "", Decision{Action: Forward, Target: "a.x"}},
		{"a.y", "a.x", Decision{Action: Forward, Target: "a", Level: 1}},
		{"a.y", "a", Decision{Action: Handle, Target: "a", Level: 1}},
		{"b", "", Decision{Action: Handle, Target: "", Level: 1}},
		{"", "a", Decision{Action: Forward, Target: ""}},
		{"Bad!", "a", Decision{Action: Forward, Target: "", Malformed: true}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Route(c.msg, c.self, live), "msg %q at %q", c.msg, c.self)
	}
}

func TestRouteHoldsWithoutBase(t *testing.T) {
	live := Lanes("a", "a.x")
	assert.Equal(t, Decision{Action: Hold, Target: ""}, Route("", "a", live), "untagged, no base")
	assert.Equal(t, Decision{Action: Hold, Target: "", Level: 1}, Route("b", "a.x", live), "foreign lane, no base")
	assert.Equal(t, Decision{Action: Forward, Target: "a", Level: 1}, Route("a.y", "a.x", live))
	// A base consumer not yet visible in the registry still handles base traffic.
	assert.Equal(t, Decision{Action: Handle, Target: ""}, Route("", "", live))
}

func TestActionString(t *testing.T) {
	assert.Equal(t, "handle", Handle.String())
	assert.Equal(t, "forward", Forward.String())
	assert.Equal(t, "hold", Hold.String())
	assert.Equal(t, "unknown", Action(0).String())
}

func BenchmarkResolve(b *testing.B) {
	live := Lanes("", "a", "a.x")
	b.ReportAllocs()
	for b.Loop() {
		Resolve("a.y.z", live)
	}
}
