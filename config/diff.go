package config

import (
	"reflect"
	"slices"
)

// Changes says what differs between two versions, so a subscriber applies
// only what moved (a weight change must not rebuild every connection).
type Changes struct {
	TopicsAdded, TopicsRemoved, TopicsChanged          []string
	ConsumersAdded, ConsumersRemoved, ConsumersChanged []string
	Batching, Failover, Timeouts, Credentials, Lanes   bool
	Shadow                                             bool
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.TopicsAdded)+len(c.TopicsRemoved)+len(c.TopicsChanged)+
		len(c.ConsumersAdded)+len(c.ConsumersRemoved)+len(c.ConsumersChanged) == 0 &&
		!c.Batching && !c.Failover && !c.Timeouts && !c.Credentials && !c.Lanes && !c.Shadow
}

// Diff compares two versions; a nil old counts as empty. Name lists are
// sorted. A topic whose clusters refer to a credential that changed is not
// listed as changed: check Credentials too.
func Diff(old, cur *Config) Changes {
	if old == nil {
		old = &Config{}
	}
	if cur == nil {
		cur = &Config{}
	}
	var ch Changes
	ch.TopicsAdded, ch.TopicsRemoved, ch.TopicsChanged = diffMap(old.Topics, cur.Topics)
	ch.ConsumersAdded, ch.ConsumersRemoved, ch.ConsumersChanged = diffMap(old.Consumers, cur.Consumers)
	ch.Batching = old.Batching != cur.Batching
	ch.Failover = old.Failover != cur.Failover
	ch.Timeouts = old.Timeouts != cur.Timeouts
	ch.Lanes = old.Lanes != cur.Lanes
	ch.Shadow = old.Shadow != cur.Shadow
	ch.Credentials = !reflect.DeepEqual(nonNil(old.Credentials), nonNil(cur.Credentials))
	return ch
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

func diffMap[V any](old, cur map[string]V) (added, removed, changed []string) {
	for k, v := range cur {
		ov, ok := old[k]
		switch {
		case !ok:
			added = append(added, k)
		case !reflect.DeepEqual(ov, v):
			changed = append(changed, k)
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			removed = append(removed, k)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	return added, removed, changed
}
