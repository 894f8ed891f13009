package producer

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twinmq/twinmq/lane"
)

// Limits that a RocketMQ 5 proxy enforces on every message; checking them
// here turns a failed round trip into an immediate, typed error.
const (
	// DefaultMaxBodyBytes is the proxy's default maxMessageSize.
	DefaultMaxBodyBytes = 4 << 20
	maxUserProperties   = 128
	maxPropertyBytes    = 16 << 10
	maxMessageGroupLen  = 64
	maxDeliveryAhead    = 24 * time.Hour
)

// isRocketMQReserved reports whether RocketMQ keeps key for itself
// (MessageConst.STRING_HASH_SET, plus the FIFO sharding key): a broker
// refuses a message whose user properties use one.
func isRocketMQReserved(key string) bool {
	switch key {
	case "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC",
		"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
		"ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
		"UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
		"1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
		"INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
		"PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS",
		"TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
		"TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
		"__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "CRC32",
		"__SHARDINGKEY":
		return true
	}
	return false
}

// sdkPropertyPrefix starts every property key this SDK writes itself (the
// lane today); user properties may not use it, so a future SDK property can
// never collide with a user's.
const sdkPropertyPrefix = "twinmq_"

// IsReservedPropertyKey reports whether key may not be used as a user
// property: RocketMQ's own keys and the keys this SDK stamps (the lane, and
// anything else starting with "twinmq_").
func IsReservedPropertyKey(key string) bool {
	if key == lane.PropertyLane || strings.HasPrefix(key, sdkPropertyPrefix) {
		return true
	}
	return isRocketMQReserved(key)
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// validateShape checks what can be checked on the message alone, without
// the configuration: the rules a RocketMQ proxy applies, so that a message
// that passes here is not refused by the broker for its form.
func validateShape(m *Message, maxBody int, now time.Time) error {
	if m == nil {
		return fmt.Errorf("nil message: %w", ErrInvalidMessage)
	}
	if len(m.Body) == 0 {
		return fmt.Errorf("topic %q: %w (RocketMQ stores no empty messages)", m.Topic, ErrEmptyBody)
	}
	if len(m.Body) > maxBody {
		return fmt.Errorf("topic %q: body of %d bytes exceeds the limit of %d: %w",
			m.Topic, len(m.Body), maxBody, ErrBodyTooLarge)
	}
	if m.Tag != "" {
		if strings.TrimSpace(m.Tag) == "" || strings.ContainsRune(m.Tag, '|') || hasControl(m.Tag) || !utf8.ValidString(m.Tag) {
			return fmt.Errorf("tag %q must be valid UTF-8, not blank, without '|' or control characters: %w", m.Tag, ErrInvalidMessage)
		}
	}
	propBytes := len(m.Tag)
	for _, k := range m.Keys {
		if strings.TrimSpace(k) == "" || hasControl(k) || !utf8.ValidString(k) {
			return fmt.Errorf("message key %q must be valid UTF-8, not blank, without control characters: %w", k, ErrInvalidMessage)
		}
		propBytes += len(k)
	}
	if m.MessageGroup != "" {
		if len(m.MessageGroup) >= maxMessageGroupLen || hasControl(m.MessageGroup) || !utf8.ValidString(m.MessageGroup) {
			return fmt.Errorf("message group %q must be valid UTF-8, shorter than %d bytes, without control characters: %w",
				m.MessageGroup, maxMessageGroupLen, ErrInvalidMessage)
		}
		if !m.DeliveryTime.IsZero() {
			return fmt.Errorf("a message cannot be both FIFO (message group %q) and delayed: %w", m.MessageGroup, ErrInvalidMessage)
		}
	}
	if !m.DeliveryTime.IsZero() && m.DeliveryTime.After(now.Add(maxDeliveryAhead)) {
		return fmt.Errorf("delivery time %s is more than %s ahead: %w", m.DeliveryTime.Format(time.RFC3339), maxDeliveryAhead, ErrInvalidMessage)
	}
	if len(m.Properties) > maxUserProperties {
		return fmt.Errorf("%d user properties, at most %d allowed: %w", len(m.Properties), maxUserProperties, ErrInvalidMessage)
	}
	for k, v := range m.Properties {
		if IsReservedPropertyKey(k) {
			return fmt.Errorf("property %q: %w (choose another key; the lane comes from the context)", k, ErrReservedProperty)
		}
		if k == "" || hasControl(k) || hasControl(v) || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("property %q: keys and values must be valid UTF-8 without control characters and keys not empty: %w", k, ErrInvalidMessage)
		}
		propBytes += len(k) + len(v)
	}
	if propBytes > maxPropertyBytes {
		return fmt.Errorf("tag, keys and properties take %d bytes, at most %d allowed: %w", propBytes, maxPropertyBytes, ErrInvalidMessage)
	}
	return nil
}
