package producer

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/lane"
)

func TestValidateShape(t *testing.T) {
	now := time.Now()
	ok := func() *Message { return &Message{Topic: "orders", Body: []byte("x")} }
	cases := []struct {
		name string
		edit func(m *Message) *Message
		want error
	}{
		{"plain message", func(m *Message) *Message { return m }, nil},
		{"nil message", func(*Message) *Message { return nil }, ErrInvalidMessage},
		{"empty body", func(m *Message) *Message { m.Body = nil; return m }, ErrEmptyBody},
		{"oversized body", func(m *Message) *Message { m.Body = make([]byte, 1025); return m }, ErrBodyTooLarge},
		{"body at the limit", func(m *Message) *Message { m.Body = make([]byte, 1024); return m }, nil},
		{"reserved RocketMQ key", func(m *Message) *Message { m.Properties = map[string]string{"UNIQ_KEY": "1"}; return m }, ErrReservedProperty},
		{"FIFO sharding key", func(m *Message) *Message { m.Properties = map[string]string{"__SHARDINGKEY": "g"}; return m }, ErrReservedProperty},
		{"lane key", func(m *Message) *Message { m.Properties = map[string]string{lane.PropertyLane: "a"}; return m }, ErrReservedProperty},
		{"SDK prefix", func(m *Message) *Message { m.Properties = map[string]string{"twinmq_x": "a"}; return m }, ErrReservedProperty},
		{"ordinary property", func(m *Message) *Message { m.Properties = map[string]string{"order_id": "42"}; return m }, nil},
		{"empty property key", func(m *Message) *Message { m.Properties = map[string]string{"": "v"}; return m }, ErrInvalidMessage},
		{"control character in value", func(m *Message) *Message { m.Properties = map[string]string{"k": "a\nb"}; return m }, ErrInvalidMessage},
		{"tag with bar", func(m *Message) *Message { m.Tag = "a|b"; return m }, ErrInvalidMessage},
		{"blank tag", func(m *Message) *Message { m.Tag = "  "; return m }, ErrInvalidMessage},
		{"blank key", func(m *Message) *Message { m.Keys = []string{" "}; return m }, ErrInvalidMessage},
		{"long message group", func(m *Message) *Message { m.MessageGroup = strings.Repeat("g", 64); return m }, ErrInvalidMessage},
		{"FIFO and delayed", func(m *Message) *Message { m.MessageGroup = "g"; m.DeliveryTime = now.Add(time.Minute); return m }, ErrInvalidMessage},
		{"delay beyond a day", func(m *Message) *Message { m.DeliveryTime = now.Add(25 * time.Hour); return m }, ErrInvalidMessage},
		{"delay within a day", func(m *Message) *Message { m.DeliveryTime = now.Add(time.Hour); return m }, nil},
		{"too many properties", func(m *Message) *Message {
			m.Properties = map[string]string{}
			for i := 0; i <= maxUserProperties; i++ {
				m.Properties[strings.Repeat("k", i+1)] = "v"
			}
			return m
		}, ErrInvalidMessage},
		{"properties too large", func(m *Message) *Message {
			m.Properties = map[string]string{"big": strings.Repeat("v", maxPropertyBytes)}
			return m
		}, ErrInvalidMessage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := validateShape(tc.edit(ok()), 1024, now)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestBatchErrorUnwrap(t *testing.T) {
	e := &BatchError{Errs: []error{nil, ErrEmptyBody, nil}}
	require.ErrorIs(t, e, ErrEmptyBody)
	require.NotErrorIs(t, e, ErrClosed)
	require.Contains(t, e.Error(), "1 of 3")
	require.Contains(t, e.Error(), "index 1")
}
