package producer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/driver"
	"github.com/twinmq/twinmq/lane"
)

// Shadow (stress-test) traffic. A logic topic whose clusters have shadow
// topics gets a second topicState, its shadow side, under shadowKey of its
// name: the same clusters with their shadow topics as physical topics, and
// a picker, brokers, accumulator keys and metric series of its own. A send
// whose context carries lane.WithShadow goes to that side only, retries
// included, so a shadow message can never reach a production topic and a
// production message never a shadow one: the two sides share no target.

var (
	// ErrNoShadowTopic means a send with the shadow mark names a logic
	// topic that has no shadow topic: neither its clusters nor a naming
	// rule of the configuration give one, or the shadow topic does not
	// exist on the clusters (then the error also wraps the brokers'
	// TOPIC_NOT_FOUND). The message is never sent to the production topic
	// instead.
	ErrNoShadowTopic = errors.New("producer: no shadow topic")
	// ErrShadowDisabled means a send with the shadow mark was refused
	// because shadow.enabled is off in the configuration in force (the
	// kill switch of stress tests). Production sends are not affected.
	ErrShadowDisabled = errors.New("producer: shadow traffic disabled")
)

// shadowPrefix starts the key of a shadow side. '/' is not allowed in a
// logic topic's name, so a key never collides with a topic.
const shadowPrefix = "shadow/"

func shadowKey(logic string) string { return shadowPrefix + logic }

func isShadowKey(key string) bool { return strings.HasPrefix(key, shadowPrefix) }

func shadowLabel(on bool) string {
	if on {
		return "true"
	}
	return "false"
}

// variant is one side of a logic topic: the production side under the
// topic's name, or the shadow side under shadowKey with each cluster's
// Topic set to its shadow topic.
type variant struct {
	key    string
	logic  string
	shadow bool
	topic  config.Topic
}

// variantsOf lists the sides of cfg's topics, in key order: every
// production side, and the shadow side of every topic that has shadow
// topics while shadow.enabled is on. With the kill switch off the shadow
// sides are dropped (their brokers are not routed), and come back with
// their clusters' routes asked for again when it is turned on.
func variantsOf(cfg *config.Config) []variant {
	var out []variant
	for _, name := range slices.Sorted(maps.Keys(cfg.Topics)) {
		tc := cfg.Topics[name]
		out = append(out, variant{key: name, logic: name, topic: tc})
		if !cfg.Shadow.Enabled || !cfg.HasShadow(name) {
			continue
		}
		st := config.Topic{Clusters: make([]config.Cluster, len(tc.Clusters))}
		for i, cc := range tc.Clusters {
			cc.Topic, _ = cfg.ShadowTopic(name, cc)
			cc.ShadowTopic = ""
			st.Clusters[i] = cc
		}
		out = append(out, variant{key: shadowKey(name), logic: name, shadow: true, topic: st})
	}
	slices.SortFunc(out, func(a, b variant) int { return strings.Compare(a.key, b.key) })
	return out
}

// topicFor returns the side of the logic topic a send with ctx goes to.
func (p *Producer) topicFor(ctx context.Context, st *settings, topic string) (*topicState, error) {
	topics := *p.topics.Load()
	if !lane.IsShadow(ctx) {
		if ts := topics[topic]; ts != nil && !isShadowKey(topic) {
			return ts, nil
		}
		return nil, p.unknownTopic(topic)
	}
	if !st.shadowOn {
		return nil, fmt.Errorf("topic %q: shadow.enabled is off in the configuration: %w", topic, ErrShadowDisabled)
	}
	if ts := topics[shadowKey(topic)]; ts != nil {
		return ts, nil
	}
	if topics[topic] == nil || isShadowKey(topic) {
		return nil, p.unknownTopic(topic)
	}
	return nil, fmt.Errorf("topic %q: neither its clusters (shadowTopic) nor a shadow naming rule (shadow.topicPrefix/topicSuffix) give it a shadow topic: %w",
		topic, ErrNoShadowTopic)
}

// stampShadow marks a shadow message with lane.PropertyShadow, on a copy
// of its properties (the caller's map is never written).
func (pd *pending) stampShadow() {
	props := make(map[string]string, len(pd.props)+1)
	maps.Copy(props, pd.props)
	props[lane.PropertyShadow] = lane.ShadowValue
	pd.props = props
	pd.size += len(lane.PropertyShadow) + len(lane.ShadowValue)
}

// shadowFailure adds ErrNoShadowTopic to the error of a shadow send that
// failed because the shadow topic is missing on the brokers.
func shadowFailure(pd *pending, err error) error {
	if !pd.topic.shadow || !errors.Is(err, driver.ErrNotFound) || errors.Is(err, ErrNoShadowTopic) {
		return err
	}
	return &sendError{
		msg:  err.Error() + " (the shadow topic is missing on the cluster; the message was not sent to the production topic)",
		errs: []error{err, ErrNoShadowTopic},
	}
}
