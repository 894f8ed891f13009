package lane

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShadowMarkIsOrthogonalToTheLane(t *testing.T) {
	ctx := context.Background()
	assert.False(t, IsShadow(ctx))
	ctx = WithLane(WithShadow(ctx, true), "a.x")
	assert.True(t, IsShadow(ctx), "setting the lane keeps the mark")
	name, _ := FromContext(ctx)
	assert.Equal(t, "a.x", name)
	assert.False(t, IsShadow(WithShadow(ctx, false)), "an explicit production mark hides a parent's")
	name, _ = FromContext(WithShadow(ctx, false))
	assert.Equal(t, "a.x", name, "setting the mark keeps the lane")
}

func TestInjectExtractShadow(t *testing.T) {
	ctx := WithLane(WithShadow(context.Background(), true), "a.x")
	props, err := Inject(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{PropertyLane: "a.x", PropertyShadow: ShadowValue}, props)

	back, err := Extract(context.Background(), props)
	require.NoError(t, err)
	assert.True(t, IsShadow(back))
	name, _ := FromContext(back)
	assert.Equal(t, "a.x", name)

	// Only the shadow mark: the lane property is left alone.
	props, err = Inject(WithShadow(context.Background(), true), map[string]string{"k": "v"})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v", PropertyShadow: ShadowValue}, props)
	// An explicit production mark removes the property; no mark leaves it.
	props, err = Inject(WithShadow(context.Background(), false), props)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v"}, props)
	props, err = Inject(context.Background(), map[string]string{PropertyShadow: ShadowValue})
	require.NoError(t, err)
	assert.Equal(t, ShadowValue, props[PropertyShadow])

	// Another value is not a mark, and Extract overrides a mark of the
	// parent context: the message decides.
	back, err = Extract(WithShadow(context.Background(), true), map[string]string{PropertyShadow: "true"})
	require.NoError(t, err)
	assert.False(t, IsShadow(back))

	// A malformed lane is refused before anything is written.
	props, err = Inject(WithLane(WithShadow(context.Background(), true), "A"), nil)
	require.ErrorIs(t, err, ErrMalformedLane)
	assert.Nil(t, props)
	assert.Contains(t, PropertyKeys(), PropertyShadow)
}
