package lane

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateAcceptsWellFormedNames(t *testing.T) {
	good := []string{
		"", "a", "a.x", "a.x.y", "gray", "v2", "0", "a_b", "a-b", "a.b-c.d_e",
		strings.Repeat("a", MaxSegmentLength),
		strings.TrimSuffix(strings.Repeat("a.", MaxDepth), "."),
	}
	for _, n := range good {
		assert.NoError(t, Validate(n), "%q", n)
	}
}

func TestValidateRejectsMalformedNames(t *testing.T) {
	bad := map[string]string{
		".":                                     "lone dot",
		"a.":                                    "trailing dot",
		".a":                                    "leading dot",
		"a..b":                                  "double dot",
		"A":                                     "upper case",
		"a.X":                                   "upper case segment",
		"a b":                                   "space",
		" a":                                    "leading space",
		"_a":                                    "leading underscore",
		"a.-b":                                  "leading dash",
		"a/b":                                   "slash",
		"é":                                     "non-ascii",
		"a\x00":                                 "nul",
		strings.Repeat("a", MaxSegmentLength+1): "long segment",
		strings.TrimSuffix(strings.Repeat("a.", MaxDepth+1), "."):       "too deep",
		strings.TrimSuffix(strings.Repeat("abcdefghijklmnop.", 8), "."): "too long",
	}
	for n, why := range bad {
		err := Validate(n)
		require.Error(t, err, "%s: %q", why, n)
		assert.ErrorIs(t, err, ErrMalformedLane, why)
	}
}

func TestParseSegments(t *testing.T) {
	segs, err := Parse("a.x.y")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "x", "y"}, segs)
	segs, err = Parse("")
	require.NoError(t, err)
	assert.Empty(t, segs)
}

func TestChain(t *testing.T) {
	assert.Equal(t, []string{"a.x.y", "a.x", "a", ""}, Chain("a.x.y"))
	assert.Equal(t, []string{"a", ""}, Chain("a"))
	assert.Equal(t, []string{""}, Chain(""))
	assert.Equal(t, []string{""}, Chain("A.x"), "a malformed lane falls straight to base")
	deep := "l1.l2.l3.l4.l5.l6.l7.l8"
	c := Chain(deep)
	require.Len(t, c, 9)
	assert.Equal(t, deep, c[0])
	assert.Equal(t, "l1", c[7])
	assert.Equal(t, "", c[8])
}

func TestParentDepthAncestor(t *testing.T) {
	p, ok := Parent("a.x")
	assert.True(t, ok)
	assert.Equal(t, "a", p)
	p, ok = Parent("a")
	assert.True(t, ok)
	assert.Equal(t, "", p)
	_, ok = Parent("")
	assert.False(t, ok)
	_, ok = Parent("a..x")
	assert.False(t, ok)

	assert.Equal(t, 0, Depth(""))
	assert.Equal(t, 3, Depth("a.x.y"))
	assert.Equal(t, -1, Depth("A"))

	assert.True(t, IsAncestor("a", "a.x"))
	assert.True(t, IsAncestor("a.x", "a.x"))
	assert.True(t, IsAncestor("", "b"))
	assert.False(t, IsAncestor("a.x", "a.y"))
	assert.False(t, IsAncestor("a", "ab"), "a prefix string is not a prefix lane")
}
