package config

import "fmt"

// Shadow routes shadow (stress-test) traffic: messages whose context
// carries lane.WithShadow go to the shadow physical topics of their logic
// topic and are consumed in the shadow groups, apart from production.
//
// A cluster's shadow topic is its ShadowTopic when set, else the naming
// rule TopicPrefix + physical topic + TopicSuffix when either is set, else
// the cluster has none. Within a logic topic either every cluster has a
// shadow topic or none does (Validate), so shadow traffic fails over as
// production traffic does. The shadow group of consumer group G is
// GroupPrefix + G + GroupSuffix; one of the two must be set as soon as a
// shadow topic exists, because a group's retry and dead-letter topics are
// the group's own: a shadow group equal to G would mix shadow and
// production retries and dead letters.
type Shadow struct {
	// Enabled is the kill switch (default true in a document; the zero
	// value in a Config built in code is off). Off, shadow sends fail and
	// consumers stop receiving shadow traffic; production is untouched.
	Enabled bool `json:"enabled"`
	// TopicPrefix and TopicSuffix make the shadow topic of every cluster
	// that has no ShadowTopic of its own.
	TopicPrefix string `json:"topicPrefix,omitempty"`
	TopicSuffix string `json:"topicSuffix,omitempty"`
	// GroupPrefix and GroupSuffix make the shadow group of every group.
	GroupPrefix string `json:"groupPrefix,omitempty"`
	GroupSuffix string `json:"groupSuffix,omitempty"`
}

// topicRule reports whether the naming rule for topics is set.
func (s Shadow) topicRule() bool { return s.TopicPrefix != "" || s.TopicSuffix != "" }

// ShadowTopic returns the shadow physical topic of cluster cc of logic
// topic logic, and false when the cluster has none. It ignores Enabled:
// the kill switch stops traffic, it does not unname topics.
func (c *Config) ShadowTopic(logic string, cc Cluster) (string, bool) {
	if cc.ShadowTopic != "" {
		return cc.ShadowTopic, true
	}
	if !c.Shadow.topicRule() {
		return "", false
	}
	physical := cc.Topic
	if physical == "" {
		physical = logic
	}
	return c.Shadow.TopicPrefix + physical + c.Shadow.TopicSuffix, true
}

// HasShadow reports whether the clusters of logic topic logic have shadow
// topics (all of them, in a valid document).
func (c *Config) HasShadow(logic string) bool {
	t, ok := c.Topics[logic]
	if !ok || len(t.Clusters) == 0 {
		return false
	}
	for _, cc := range t.Clusters {
		if _, ok := c.ShadowTopic(logic, cc); !ok {
			return false
		}
	}
	return true
}

// ShadowGroup returns the shadow group of consumer group g, and false when
// the document has no naming rule for groups.
func (c *Config) ShadowGroup(g string) (string, bool) {
	if c.Shadow.GroupPrefix == "" && c.Shadow.GroupSuffix == "" {
		return "", false
	}
	return c.Shadow.GroupPrefix + g + c.Shadow.GroupSuffix, true
}

// affix reports whether s may prefix or suffix a RocketMQ name.
func affix(s string) bool { return s == "" || rocketName(s) }

func (c *Config) validateShadow(ps *problems) {
	s := c.Shadow
	for _, f := range []struct{ path, v string }{
		{"shadow.topicPrefix", s.TopicPrefix}, {"shadow.topicSuffix", s.TopicSuffix},
		{"shadow.groupPrefix", s.GroupPrefix}, {"shadow.groupSuffix", s.GroupSuffix},
	} {
		if !affix(f.v) {
			ps.add(f.path, "%q must be made of [A-Za-z0-9%%|_-]", f.v)
		}
	}
	// Every production physical topic, to keep shadow ones apart.
	production := map[string]string{}
	for _, name := range sortedKeys(c.Topics) {
		for i, cc := range c.Topics[name].Clusters {
			physical := cc.Topic
			if physical == "" {
				physical = name
			}
			if _, ok := production[physical]; !ok {
				production[physical] = fmt.Sprintf("topics.%s.clusters[%d]", name, i)
			}
		}
	}
	anyShadow := false
	for _, name := range sortedKeys(c.Topics) {
		clusters := c.Topics[name].Clusters
		with := 0
		for _, cc := range clusters {
			if _, ok := c.ShadowTopic(name, cc); ok {
				with++
			}
		}
		if with > 0 {
			anyShadow = true
		}
		for i, cc := range clusters {
			cp := fmt.Sprintf("topics.%s.clusters[%d].shadowTopic", name, i)
			st, ok := c.ShadowTopic(name, cc)
			if !ok {
				if with > 0 {
					ps.add(cp, "missing while %d other cluster(s) of the topic have one: shadow traffic could not fail over to this cluster (set it, or a shadow.topicPrefix/topicSuffix rule)", with)
				}
				continue
			}
			if !rocketName(st) || len(st) > MaxTopicNameLength {
				ps.add(cp, "shadow topic %q must be 1..%d of [A-Za-z0-9%%|_-]", st, MaxTopicNameLength)
			}
			if at, ok := production[st]; ok {
				ps.add(cp, "shadow topic %q is the production topic of %s: shadow and production traffic must never share a topic", st, at)
			}
		}
	}
	if !anyShadow {
		return
	}
	if s.GroupPrefix == "" && s.GroupSuffix == "" {
		ps.add("shadow", "groupPrefix or groupSuffix must be set when a topic has a shadow topic: the shadow group must differ from the production group so offsets, retries and dead letters stay apart")
		return
	}
	for _, g := range sortedKeys(c.Consumers) {
		sg, _ := c.ShadowGroup(g)
		if len(sg) > MaxGroupNameLength {
			ps.add("consumers."+g, "shadow group %q is longer than %d", sg, MaxGroupNameLength)
		}
		if _, ok := c.Consumers[sg]; ok {
			ps.add("consumers."+g, "shadow group %q is also listed as a production group", sg)
		}
	}
}
