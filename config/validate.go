package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twinmq/twinmq/lane"
)

// Limits checked by Validate. The RocketMQ ones come from the broker's own
// checks (topic and group names, maximum message size); the others catch
// unit mistakes, such as "10s" written for "10ms".
const (
	MaxTopicNameLength   = 127
	MaxGroupNameLength   = 120
	MaxClusterNameLength = 64
	MaxWeight            = 10000
	MaxPriority          = 100
	MaxBatchMaxBytes     = 4 << 20
	MaxMaxDelay          = time.Second
	MaxConcurrency       = 4096
	MaxMaxAttempts       = 1000
	MinLeaseTTL          = 100 * time.Millisecond
)

// Problem is one broken rule, located by a JSON-like path.
type Problem struct {
	Path    string
	Message string
}

// String is "path: message", or the message alone for the document as a
// whole.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError lists every problem of a document, so one round of fixes
// mends them all. It wraps ErrInvalidConfig.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config: %d problem(s): ", len(e.Problems))
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalidConfig }

// sortedKeys lists a map's keys in order, so problems come in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Validate checks every rule and returns a *ValidationError listing all
// broken ones, or nil. It does not modify c.
func (c *Config) Validate() error {
	if c == nil {
		return &ValidationError{Problems: []Problem{{Path: "", Message: "no document"}}}
	}
	var ps problems
	c.validateTopics(&ps)
	c.validateBatching(&ps)
	c.validateFailover(&ps)
	c.validateTimeouts(&ps)
	c.validateCredentials(&ps)
	c.validateConsumers(&ps)
	c.validateLanes(&ps)
	c.validateShadow(&ps)
	if len(ps) == 0 {
		return nil
	}
	return &ValidationError{Problems: ps}
}

// rocketName reports whether s is made of the characters RocketMQ allows in
// topic and group names: letters, digits, '%', '|', '_' and '-'.
func rocketName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '%' || c == '|' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func clusterName(s string) bool {
	if s == "" || len(s) > MaxClusterNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func validEndpoint(ep string) error {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("must be host:port")
	}
	if host == "" {
		return fmt.Errorf("empty host")
	}
	if _, err := netip.ParseAddr(host); err != nil && !hostName(host) {
		return fmt.Errorf("host %q is neither an IP address nor a host name", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] < '0' || port[0] > '9' {
		return fmt.Errorf("port %q must be a number in 1..65535", port)
	}
	return nil
}

// hostName reports whether h is a DNS name: dot-separated labels of
// letters, digits, hyphens and underscores (seen in service names), none
// empty, at most 253 bytes in all, with an optional final dot (a fully
// qualified name, which skips the resolver's search domains).
func hostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

func (c *Config) validateTopics(ps *problems) {
	if len(c.Topics) == 0 {
		ps.add("topics", "at least one logic topic is required")
	}
	for _, name := range sortedKeys(c.Topics) {
		t := c.Topics[name]
		tp := "topics." + name
		if !rocketName(name) || len(name) > MaxTopicNameLength {
			ps.add(tp, "logic topic name must be 1..%d of [A-Za-z0-9%%|_-]", MaxTopicNameLength)
		}
		if len(t.Clusters) == 0 {
			ps.add(tp+".clusters", "at least one cluster is required")
			continue
		}
		seen := map[string]bool{}
		weighted := false
		for i, k := range t.Clusters {
			cp := fmt.Sprintf("%s.clusters[%d]", tp, i)
			switch {
			case !clusterName(k.Name):
				ps.add(cp+".name", "%q must be 1..%d of [A-Za-z0-9._-]", k.Name, MaxClusterNameLength)
			case seen[k.Name]:
				ps.add(cp+".name", "%q appears twice in the topic", k.Name)
			}
			seen[k.Name] = true
			switch k.Protocol {
			case "", ProtocolGRPC, ProtocolRemoting:
			default:
				ps.add(cp+".protocol", "%q must be %q (the default) or %q", string(k.Protocol), ProtocolGRPC, ProtocolRemoting)
			}
			if len(k.Endpoints) == 0 {
				ps.add(cp+".endpoints", "at least one host:port is required")
			}
			eps := map[string]bool{}
			for j, ep := range k.Endpoints {
				if err := validEndpoint(ep); err != nil {
					ps.add(fmt.Sprintf("%s.endpoints[%d]", cp, j), "%q: %v", ep, err)
				} else if eps[ep] {
					ps.add(fmt.Sprintf("%s.endpoints[%d]", cp, j), "%q appears twice", ep)
				}
				eps[ep] = true
			}
			switch {
			case k.Topic == "":
				// Parse fills it in; a Config built in code must set it.
				ps.add(cp+".topic", "physical topic is empty: set it (Parse defaults it to the logic topic's name %q, a Config built in code does not)", name)
			case !rocketName(k.Topic) || len(k.Topic) > MaxTopicNameLength:
				ps.add(cp+".topic", "physical topic %q must be 1..%d of [A-Za-z0-9%%|_-]", k.Topic, MaxTopicNameLength)
			}
			if k.Weight < 0 || k.Weight > MaxWeight {
				ps.add(cp+".weight", "%d must be in 0..%d", k.Weight, MaxWeight)
			}
			if k.Weight > 0 {
				weighted = true
			}
			if k.Priority < 0 || k.Priority > MaxPriority {
				ps.add(cp+".priority", "%d must be in 0..%d", k.Priority, MaxPriority)
			}
			if k.Credentials != "" {
				if _, ok := c.Credentials[k.Credentials]; !ok {
					ps.add(cp+".credentials", "%q is not defined under credentials", k.Credentials)
				}
			}
		}
		if !weighted {
			ps.add(tp+".clusters", "every cluster has weight 0, so the topic could take no traffic: give one a positive weight (a document that omits weight gets %d; in a Config built in code the zero value means drained)", DefaultWeight)
		}
	}
}

func (c *Config) validateBatching(ps *problems) {
	b := c.Batching
	if b.MaxDelay <= 0 || b.MaxDelay.D() > MaxMaxDelay {
		ps.add("batching.maxDelay", "%v must be in (0, %v]", b.MaxDelay, MaxMaxDelay)
	}
	if b.BatchMaxBytes <= 0 || b.BatchMaxBytes > MaxBatchMaxBytes {
		ps.add("batching.batchMaxBytes", "%d must be in 1..%d (the broker's largest message)", b.BatchMaxBytes, MaxBatchMaxBytes)
	}
	if b.TotalBatchMaxBytes < int64(b.BatchMaxBytes) {
		ps.add("batching.totalBatchMaxBytes", "%d must be at least batchMaxBytes (%d)", b.TotalBatchMaxBytes, b.BatchMaxBytes)
	}
}

func (c *Config) validateFailover(ps *problems) {
	f := c.Failover
	if !(f.FailureFactor > 0 && f.FailureFactor < 1) {
		ps.add("failover.failureFactor", "%v must be in (0, 1): a failure must lower the weight and keep it positive", f.FailureFactor)
	}
	if !(f.Recovery > 0 && f.Recovery <= 1) {
		ps.add("failover.recovery", "%v must be in (0, 1]", f.Recovery)
	}
	if !(f.MinWeight >= 0 && f.MinWeight < 1) {
		ps.add("failover.minWeight", "%v must be in [0, 1)", f.MinWeight)
	}
	if f.ProbeInterval <= 0 {
		ps.add("failover.probeInterval", "%v must be positive", f.ProbeInterval)
	}
}

func (c *Config) validateTimeouts(ps *problems) {
	t := c.Timeouts
	if t.Request <= 0 {
		ps.add("timeouts.request", "%v must be positive", t.Request)
	}
	if t.SendDeadline < t.Request {
		ps.add("timeouts.sendDeadline", "%v must be at least the request timeout (%v)", t.SendDeadline, t.Request)
	}
}

func (c *Config) validateCredentials(ps *problems) {
	for _, name := range sortedKeys(c.Credentials) {
		cr := c.Credentials[name]
		p := "credentials." + name
		if name == "" {
			ps.add("credentials", "a credential has an empty name")
		}
		if cr.AccessKey == "" {
			ps.add(p+".accessKey", "is empty")
		}
		if cr.AccessSecret == "" {
			ps.add(p+".accessSecret", "is empty")
		}
	}
}

func (c *Config) validateConsumers(ps *problems) {
	for _, g := range sortedKeys(c.Consumers) {
		cs := c.Consumers[g]
		p := "consumers." + g
		if !rocketName(g) || len(g) > MaxGroupNameLength {
			ps.add(p, "group name must be 1..%d of [A-Za-z0-9%%|_-]", MaxGroupNameLength)
		}
		if cs.Concurrency < 1 || cs.Concurrency > MaxConcurrency {
			ps.add(p+".concurrency", "%d must be in 1..%d (Parse defaults a missing one to %d)", cs.Concurrency, MaxConcurrency, DefaultConcurrency)
		}
		if cs.MaxAttempts < 1 || cs.MaxAttempts > MaxMaxAttempts {
			ps.add(p+".maxAttempts", "%d must be in 1..%d (Parse defaults a missing one to %d)", cs.MaxAttempts, MaxMaxAttempts, DefaultMaxAttempts)
		}
		if err := lane.Validate(cs.Lane); err != nil {
			ps.add(p+".lane", "%v", err)
		}
		if cs.Mode != "" && cs.Mode != ModeDirect && cs.Mode != ModeProxy {
			ps.add(p+".mode", "%q must be %q or %q", cs.Mode, ModeDirect, ModeProxy)
		}
	}
}

func (c *Config) validateLanes(ps *problems) {
	if c.Lanes.LeaseTTL < Duration(MinLeaseTTL) {
		ps.add("lanes.leaseTTL", "%v must be at least %v (the lease is renewed every third of it)", c.Lanes.LeaseTTL, MinLeaseTTL)
	}
	if c.Lanes.ForwardTimeout <= 0 {
		ps.add("lanes.forwardTimeout", "%v must be positive", c.Lanes.ForwardTimeout)
	}
}
