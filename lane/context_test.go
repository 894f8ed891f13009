package lane

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestContextCarriesLane(t *testing.T) {
	ctx := context.Background()
	_, ok := FromContext(ctx)
	assert.False(t, ok)

	ctx = WithLane(ctx, "a.x")
	l, ok := FromContext(ctx)
	assert.True(t, ok)
	assert.Equal(t, "a.x", l)

	base := WithLane(ctx, "")
	l, ok = FromContext(base)
	assert.True(t, ok, "explicit base hides the parent's lane")
	assert.Equal(t, "", l)
}

func TestInjectExtractRoundTrip(t *testing.T) {
	props, err := Inject(WithLane(context.Background(), "a.x"), nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{PropertyLane: "a.x"}, props)

	ctx, err := Extract(context.Background(), props)
	require.NoError(t, err)
	l, ok := FromContext(ctx)
	assert.True(t, ok)
	assert.Equal(t, "a.x", l)
}

func TestInjectWithoutLaneLeavesPropsAlone(t *testing.T) {
	in := map[string]string{"k": "v", PropertyLane: "b"}
	out, err := Inject(context.Background(), in)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v", PropertyLane: "b"}, out)

	out, err = Inject(WithLane(context.Background(), ""), in)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v"}, out, "explicit base removes the property")
}

func TestInjectRefusesMalformedLane(t *testing.T) {
	in := map[string]string{"k": "v"}
	out, err := Inject(WithLane(context.Background(), "A..b"), in)
	assert.ErrorIs(t, err, ErrMalformedLane)
	assert.Equal(t, map[string]string{"k": "v"}, out)
}

func TestExtractMalformedIsBase(t *testing.T) {
	ctx, err := Extract(context.Background(), map[string]string{PropertyLane: "NOPE"})
	assert.ErrorIs(t, err, ErrMalformedLane)
	l, ok := FromContext(ctx)
	assert.True(t, ok)
	assert.Equal(t, "", l)

	ctx, err = Extract(WithLane(context.Background(), "a"), nil)
	require.NoError(t, err)
	l, _ = FromContext(ctx)
	assert.Equal(t, "", l, "a message without the property is base, whatever the parent context says")
}

func TestPropertyKeyIsNotReservedByRocketMQ(t *testing.T) {
	// RocketMQ reserves upper-case keys and "__"-prefixed ones.
	for _, k := range PropertyKeys() {
		assert.NotContains(t, k, "__")
		for _, c := range k {
			assert.False(t, c >= 'A' && c <= 'Z', "key %q has upper case", k)
		}
	}
}
