package broker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Limits on resource names, as RocketMQ's validators define them.
const (
	maxTopicNameLen = 127
	maxGroupNameLen = 120
	// dlqPrefix names the dead-letter topic of a group: %DLQ%<group>.
	dlqPrefix = "%DLQ%"
	// retryPrefix names RocketMQ's retry topics; a client may not send to one.
	retryPrefix       = "%RETRY%"
	systemTopicPrefix = "rmq_sys_"
	systemGroupPrefix = "CID_RMQ_SYS_"
)

// DLQTopic returns the dead-letter topic of a consumer group.
func DLQTopic(group string) string { return dlqPrefix + group }

// isSystemTopic reports RocketMQ's built-in topics (TopicValidator), refused
// as user topics.
func isSystemTopic(name string) bool {
	switch name {
	case "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
		"RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
		"SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT":
		return true
	}
	return strings.HasPrefix(name, systemTopicPrefix)
}

// isSystemGroup reports RocketMQ's built-in consumer and producer groups
// (MixAll).
func isSystemGroup(name string) bool {
	switch name {
	case "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER",
		"SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION",
		"CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "DEFAULT_CONSUMER", "DEFAULT_PRODUCER":
		return true
	}
	return strings.HasPrefix(name, systemGroupPrefix)
}

// validNameChar is the character class of topic and group names:
// ^[%|a-zA-Z0-9_-]+$.
func validNameChar(r byte) bool {
	return r == '%' || r == '|' || r == '_' || r == '-' ||
		(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

var (
	errBlankName   = errors.New("name is blank")
	errNameTooLong = errors.New("name too long")
	errNameChars   = errors.New("name has characters outside [%|a-zA-Z0-9_-]")
	errSystemName  = errors.New("name is reserved by the system")
)

func checkName(name string, max int) error {
	if strings.TrimSpace(name) == "" {
		return errBlankName
	}
	if len(name) > max {
		return fmt.Errorf("%w: %d characters, at most %d", errNameTooLong, len(name), max)
	}
	for i := 0; i < len(name); i++ {
		if !validNameChar(name[i]) {
			return errNameChars
		}
	}
	return nil
}

// checkTopicName applies the proxy's topic rules (ILLEGAL_TOPIC).
func checkTopicName(name string) error {
	if err := checkName(name, maxTopicNameLen); err != nil {
		return err
	}
	if isSystemTopic(name) {
		return errSystemName
	}
	return nil
}

// checkGroupName applies the proxy's group rules (ILLEGAL_CONSUMER_GROUP).
func checkGroupName(name string) error {
	if err := checkName(name, maxGroupNameLen); err != nil {
		return err
	}
	if isSystemGroup(name) {
		return errSystemName
	}
	return nil
}

// isReservedKey reports the property keys RocketMQ keeps for itself
// (MessageConst.STRING_HASH_SET): a user property may not use them, and they
// are stripped from received user properties.
func isReservedKey(k string) bool {
	switch k {
	case "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC",
		"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID",
		"ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
		"UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
		"1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
		"INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME",
		"PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS",
		"TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
		"TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
		"__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "CRC32":
		return true
	}
	return false
}

// Property keys the broker writes into stored messages. Those that are not
// reserved (shardingKey, traceContext, recoveryKey) can also be sent by users,
// exactly as with RocketMQ.
const (
	propKeys          = "KEYS"
	propUniqKey       = "UNIQ_KEY"
	propTimerDeliver  = "TIMER_DELIVER_MS"
	propTranMsg       = "TRAN_MSG"
	propProducerGroup = "PGROUP"
	propDLQTopic      = "DLQ_ORIGIN_TOPIC"
	propDLQMessageID  = "DLQ_ORIGIN_MESSAGE_ID"
	propShardingKey   = "__SHARDINGKEY"
	propTraceContext  = "TRACE_CONTEXT"
	propRecovery      = "CHECK_IMMUNITY_TIME_IN_SECONDS"
)

// Message flags stored with each message (store.Message.Flags), with the
// bit values of RocketMQ's sysFlag so the meaning is familiar.
const (
	// FlagCompressed: the body is compressed (body_encoding GZIP).
	FlagCompressed uint32 = 0x1
	// FlagTransactionPrepared: a half message of a transaction.
	FlagTransactionPrepared uint32 = 0x4
	// FlagTransactionCommit: a committed transactional message.
	FlagTransactionCommit uint32 = 0x8
)

// splitEndpoint parses host:port with a numeric port.
func splitEndpoint(ep string) (string, int32, error) {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", 0, fmt.Errorf("endpoint %q: %w", ep, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("endpoint %q: bad port: %w", ep, err)
	}
	return host, int32(p), nil
}
