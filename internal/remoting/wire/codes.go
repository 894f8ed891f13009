package wire

// Request codes (RequestCode.java) this package's users speak.
const (
	CodeSendMessage           int32 = 10
	CodePullMessage           int32 = 11
	CodeHeartbeat             int32 = 34
	CodeUnregisterClient      int32 = 35
	CodeEndTransaction        int32 = 37
	CodeCheckTransactionState int32 = 39
	CodeGetRouteInfoByTopic   int32 = 105
	CodeSendMessageV2         int32 = 310
	CodeSendBatchMessage      int32 = 320
)

// Response codes (ResponseCode.java).
const (
	RespSuccess                 int32 = 0
	RespSystemError             int32 = 1
	RespSystemBusy              int32 = 2
	RespRequestCodeNotSupported int32 = 3
	RespTransactionFailed       int32 = 4
	RespFlushDiskTimeout        int32 = 10
	RespSlaveNotAvailable       int32 = 11
	RespFlushSlaveTimeout       int32 = 12
	RespMessageIllegal          int32 = 13
	RespServiceNotAvailable     int32 = 14
	RespVersionNotSupported     int32 = 15
	RespNoPermission            int32 = 16
	RespTopicNotExist           int32 = 17
	RespPullNotFound            int32 = 19
	RespPullRetryImmediately    int32 = 20
	RespPullOffsetMoved         int32 = 21
)

// Property names (MessageConst.java) the codec's users set or read.
const (
	PropKeys          = "KEYS"
	PropTags          = "TAGS"
	PropWait          = "WAIT"
	PropUniqKey       = "UNIQ_KEY"
	PropShardingKey   = "__SHARDINGKEY"
	PropTraceContext  = "TRACE_CONTEXT"
	PropTranMsg       = "TRAN_MSG"
	PropProducerGroup = "PGROUP"
	PropDeliverMS     = "TIMER_DELIVER_MS"
	PropDelayLevel    = "DELAY"
)

// Send header V2 field names (SendMessageRequestHeaderV2.java).
const (
	SendProducerGroup = "a"
	SendTopic         = "b"
	SendDefaultTopic  = "c"
	SendDefaultQueues = "d"
	SendQueueID       = "e"
	SendSysFlag       = "f"
	SendBornTimestamp = "g"
	SendFlag          = "h"
	SendProperties    = "i"
	SendReconsume     = "j"
	SendUnitMode      = "k"
	SendMaxReconsume  = "l"
	SendBatch         = "m"
	SendBrokerName    = "n"
)

// Send response header fields (SendMessageResponseHeader.java).
const (
	RespMsgID       = "msgId"
	RespQueueID     = "queueId"
	RespQueueOffset = "queueOffset"
	RespTxID        = "transactionId"
)

// SysFlag bits (MessageSysFlag.java).
const (
	SysCompressed         int32 = 0x1
	SysTransactionPrepare int32 = 0x4
	SysTransactionCommit  int32 = 0x8
	SysTransactionRollbck int32 = 0xC
)
