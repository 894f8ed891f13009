package remoting

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twinmq/twinmq/internal/remoting/wire"
	"github.com/twinmq/twinmq/rmqerr"
)

// PullStatus is the outcome of a PULL_MESSAGE.
type PullStatus int

const (
	// PullFound: Messages holds what the queue had from the offset on.
	PullFound PullStatus = iota
	// PullNoNewMessage: nothing at or after the offset (yet).
	PullNoNewMessage
	// PullRetry: the broker asks to pull again at once (nothing matched
	// in what it scanned).
	PullRetry
	// PullOffsetIllegal: the offset is outside the queue's range;
	// NextOffset says where to go on.
	PullOffsetIllegal
)

// PullRequest names a queue to read and where from. It is the minimum a
// reader needs (the consumer half builds on it): no long polling, no
// offset commit, every tag.
type PullRequest struct {
	Addr          string // the broker's master
	Topic         string
	QueueID       int32
	Offset        int64
	MaxMessages   int32 // default 32
	ConsumerGroup string
}

// PullResult is what a pull returned.
type PullResult struct {
	Status     PullStatus
	NextOffset int64
	MinOffset  int64
	MaxOffset  int64
	// Messages as stored: their properties (UNIQ_KEY, TAGS, KEYS, ...) as
	// the producer wrote them, plus what the broker added.
	Messages []wire.MessageExt
}

// PullSysFlag bits (PullSysFlag.java).
const pullFlagSubscription = 0x4

// Pull reads a queue once with PULL_MESSAGE, subscribing to every tag. A
// response other than the four pull statuses is an error (CheckResponse's
// classes).
func (c *Client) Pull(ctx context.Context, r PullRequest) (PullResult, error) {
	if r.MaxMessages <= 0 {
		r.MaxMessages = 32
	}
	h := &wire.Header{Code: wire.CodePullMessage, Ext: map[string]string{
		"consumerGroup":        r.ConsumerGroup,
		"topic":                r.Topic,
		"queueId":              strconv.Itoa(int(r.QueueID)),
		"queueOffset":          strconv.FormatInt(r.Offset, 10),
		"maxMsgNums":           strconv.Itoa(int(r.MaxMessages)),
		"sysFlag":              strconv.Itoa(pullFlagSubscription),
		"commitOffset":         "0",
		"suspendTimeoutMillis": "0",
		"subscription":         "*",
		"subVersion":           "0",
		"expressionType":       "TAG",
	}}
	resp, err := c.Invoke(ctx, r.Addr, h, nil)
	if err != nil {
		return PullResult{}, err
	}
	var res PullResult
	switch resp.Code {
	case wire.RespSuccess:
		res.Status = PullFound
	case wire.RespPullNotFound:
		res.Status = PullNoNewMessage
	case wire.RespPullRetryImmediately:
		res.Status = PullRetry
	case wire.RespPullOffsetMoved:
		res.Status = PullOffsetIllegal
	default:
		return PullResult{}, CheckResponse(r.Addr, resp)
	}
	var errs []error
	parse := func(k string) int64 {
		v, err := strconv.ParseInt(resp.Ext[k], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
		return v
	}
	res.NextOffset = parse("nextBeginOffset")
	res.MinOffset = parse("minOffset")
	res.MaxOffset = parse("maxOffset")
	if err := errors.Join(errs...); err != nil {
		return PullResult{}, fmt.Errorf("remoting %s: pull response: %w: %w", r.Addr, rmqerr.ErrInternal, err)
	}
	if res.Status == PullFound {
		res.Messages, err = wire.DecodeMessageExts(resp.Body)
		if err != nil {
			return PullResult{}, fmt.Errorf("remoting %s: pull response: %w", r.Addr, err)
		}
	}
	return res, nil
}
