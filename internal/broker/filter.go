package broker

import (
	"strings"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

// tagFilter is a parsed TAG filter expression: "*" (or empty) matches every
// message, "a || b" matches messages tagged a or b.
type tagFilter struct {
	all  bool
	tags map[string]struct{}
}

// parseFilter parses a FilterExpression as the proxy does: every type but
// SQL is a TAG expression. SQL92 filtering is not supported by this broker.
func parseFilter(fe *rmqpb.FilterExpression) (tagFilter, error) {
	if fe.GetType() == rmqpb.FilterType_SQL {
		return tagFilter{}, statusErr(rmqpb.Code_ILLEGAL_FILTER_EXPRESSION, "SQL92 filter expressions are not supported by this broker")
	}
	return parseTagExpression(fe.GetExpression())
}

func parseTagExpression(expr string) (tagFilter, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return tagFilter{all: true}, nil
	}
	f := tagFilter{tags: map[string]struct{}{}}
	for _, t := range strings.Split(expr, "||") {
		if t = strings.TrimSpace(t); t != "" {
			if t == "*" {
				return tagFilter{all: true}, nil
			}
			f.tags[t] = struct{}{}
		}
	}
	if len(f.tags) == 0 {
		return tagFilter{}, statusErr(rmqpb.Code_ILLEGAL_FILTER_EXPRESSION, "tag expression %q names no tag", expr)
	}
	return f, nil
}

func (f tagFilter) match(tag string) bool {
	if f.all {
		return true
	}
	_, ok := f.tags[tag]
	return ok
}
