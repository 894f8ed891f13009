package ctl

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/twinmq/twinmq/config"
)

// describe lists, one line each, what a reload from old to cur changes:
// every item config.Diff reports, in detail down to the fields of each
// cluster and section. Field names are the document's. Secrets are never
// printed.
func describe(old, cur *config.Config) []string {
	ch := config.Diff(old, cur)
	if ch.Empty() {
		return nil
	}
	var out []string
	for _, name := range union(ch.TopicsAdded, ch.TopicsRemoved, ch.TopicsChanged) {
		p := "topic " + name
		switch {
		case slices.Contains(ch.TopicsAdded, name):
			out = append(out, p+" added")
			for _, k := range cur.Topics[name].Clusters {
				out = append(out, fmt.Sprintf("%s: cluster %s added (%s)", p, k.Name, summary(k, "name")))
			}
		case slices.Contains(ch.TopicsRemoved, name):
			out = append(out, p+" removed")
		default:
			out = append(out, topicChanges(p, old.Topics[name], cur.Topics[name])...)
		}
	}
	for _, g := range union(ch.ConsumersAdded, ch.ConsumersRemoved, ch.ConsumersChanged) {
		p := "consumer " + g
		switch {
		case slices.Contains(ch.ConsumersAdded, g):
			out = append(out, fmt.Sprintf("%s added (%s)", p, summary(cur.Consumers[g])))
		case slices.Contains(ch.ConsumersRemoved, g):
			out = append(out, p+" removed")
		default:
			out = append(out, changed(p, fieldChanges(old.Consumers[g], cur.Consumers[g]))...)
		}
	}
	if ch.Credentials {
		out = append(out, credentialChanges(old.Credentials, cur.Credentials)...)
	}
	sections := []struct {
		name string
		on   bool
		a, b any
	}{
		{"batching", ch.Batching, old.Batching, cur.Batching},
		{"failover", ch.Failover, old.Failover, cur.Failover},
		{"timeouts", ch.Timeouts, old.Timeouts, cur.Timeouts},
		{"lanes", ch.Lanes, old.Lanes, cur.Lanes},
	}
	for _, s := range sections {
		if s.on {
			out = append(out, changed(s.name, fieldChanges(s.a, s.b))...)
		}
	}
	return out
}

// topicChanges details a changed topic, its clusters matched by name.
func topicChanges(p string, old, cur config.Topic) []string {
	var out []string
	find := func(ks []config.Cluster, name string) (config.Cluster, bool) {
		i := slices.IndexFunc(ks, func(k config.Cluster) bool { return k.Name == name })
		if i < 0 {
			return config.Cluster{}, false
		}
		return ks[i], true
	}
	for _, k := range cur.Clusters {
		cp := p + ": cluster " + k.Name
		o, ok := find(old.Clusters, k.Name)
		if !ok {
			out = append(out, fmt.Sprintf("%s added (%s)", cp, summary(k, "name")))
			continue
		}
		for _, f := range fieldChanges(o, k) {
			out = append(out, cp+" "+f)
		}
	}
	for _, o := range old.Clusters {
		if _, ok := find(cur.Clusters, o.Name); !ok {
			out = append(out, p+": cluster "+o.Name+" removed")
		}
	}
	// The order of the clusters both versions have.
	var was, is []string
	for _, o := range old.Clusters {
		if _, ok := find(cur.Clusters, o.Name); ok {
			was = append(was, o.Name)
		}
	}
	for _, k := range cur.Clusters {
		if _, ok := find(old.Clusters, k.Name); ok {
			is = append(is, k.Name)
		}
	}
	if !slices.Equal(was, is) {
		out = append(out, fmt.Sprintf("%s: clusters reordered %s -> %s", p, strings.Join(was, ","), strings.Join(is, ",")))
	}
	if len(out) == 0 {
		// A field of Topic this command does not know of.
		out = append(out, p+" changed")
	}
	return out
}

// changed turns a list of field changes into lines under p, or says p
// changed when the details found none (a field this command does not know
// of, such as one a newer SDK added).
func changed(p string, fields []string) []string {
	if len(fields) == 0 {
		return []string{p + " changed"}
	}
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = p + ": " + f
	}
	return out
}

// credentialChanges lists credentials added, removed or changed; an access
// key is shown, a secret only said to have changed.
func credentialChanges(old, cur map[string]config.Credential) []string {
	var names []string
	for n := range old {
		names = append(names, n)
	}
	for n := range cur {
		if _, ok := old[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []string
	for _, n := range names {
		o, inOld := old[n]
		c, inCur := cur[n]
		p := "credential " + n
		switch {
		case !inOld:
			out = append(out, fmt.Sprintf("%s added (accessKey %q)", p, c.AccessKey))
		case !inCur:
			out = append(out, p+" removed")
		default:
			if o.AccessKey != c.AccessKey {
				out = append(out, fmt.Sprintf("%s: accessKey %q -> %q", p, o.AccessKey, c.AccessKey))
			}
			if o.AccessSecret != c.AccessSecret {
				out = append(out, p+": accessSecret changed")
			}
		}
	}
	return out
}

// fieldChanges compares two structs of one type field by field:
// "name old -> new" for each differing field, named by its JSON key.
func fieldChanges(old, cur any) []string {
	a, b := reflect.ValueOf(old), reflect.ValueOf(cur)
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		if !reflect.DeepEqual(x, y) {
			out = append(out, fmt.Sprintf("%s %s -> %s", jsonName(f), show(x), show(y)))
		}
	}
	return out
}

// summary lists a struct's fields as "name value, ...", but those skipped
// and empty optional ones.
func summary(v any, skip ...string) string {
	rv := reflect.ValueOf(v)
	var parts []string
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		n := jsonName(f)
		if !f.IsExported() || slices.Contains(skip, n) ||
			strings.Contains(f.Tag.Get("json"), "omitempty") && rv.Field(i).IsZero() {
			continue
		}
		parts = append(parts, n+" "+show(rv.Field(i).Interface()))
	}
	return strings.Join(parts, ", ")
}

func jsonName(f reflect.StructField) string {
	n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if n == "" || n == "-" {
		return f.Name
	}
	return n
}

// show formats a value as the document would hold it: strings quoted,
// durations as "10ms".
func show(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case []string:
		q := make([]string, len(x))
		for i, s := range x {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, " ") + "]"
	case fmt.Stringer:
		return x.String()
	default:
		return fmt.Sprint(v)
	}
}

// union merges sorted name lists into one sorted list.
func union(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
