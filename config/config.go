package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is wrapped by every error about a document that cannot be
// used: bad JSON, unknown fields, wrong types, or values that break a rule.
var ErrInvalidConfig = errors.New("config: invalid configuration")

// Defaults applied by Parse to fields the document leaves out.
const (
	DefaultWeight             = 100
	DefaultMaxDelay           = 10 * time.Millisecond
	DefaultBatchMaxBytes      = 256 << 10
	DefaultTotalBatchMaxBytes = 32 << 20
	DefaultFailureFactor      = 0.5
	DefaultRecovery           = 0.01
	DefaultProbeInterval      = time.Second
	DefaultSlowRequest        = 500 * time.Millisecond
	DefaultRequestTimeout     = 3 * time.Second
	DefaultSendDeadline       = 10 * time.Second
	DefaultConcurrency        = 16
	DefaultMaxAttempts        = 16
	DefaultLeaseTTL           = 10 * time.Second
	DefaultForwardTimeout     = 5 * time.Second
)

// Consumer modes.
const (
	// ModeDirect: every instance receives from the brokers itself.
	ModeDirect = "direct"
	// ModeProxy is reserved: some instances receive and push to the rest
	// over the forwarding RPC. It is accepted so a platform can stage it.
	ModeProxy = "proxy"
)

// Config is one version of the document. A *Config handed out by a Watcher
// or a Source is shared between goroutines: treat it as read-only, and Clone
// it to derive a new one.
type Config struct {
	// Topics maps a logic topic name to where it lives.
	Topics map[string]Topic `json:"topics"`
	// Batching drives the producer's accumulators.
	Batching Batching `json:"batching"`
	// Failover drives the weighted health of endpoints.
	Failover Failover `json:"failover"`
	// Timeouts of the RocketMQ calls.
	Timeouts Timeouts `json:"timeouts"`
	// Credentials by name; clusters refer to them with Cluster.Credentials.
	Credentials map[string]Credential `json:"credentials,omitempty"`
	// Consumers maps a consumer group to its live settings.
	Consumers map[string]Consumer `json:"consumers,omitempty"`
	// Lanes drives lane routing between consumers.
	Lanes Lanes `json:"lanes"`
	// Shadow routes shadow (stress-test) traffic apart from production.
	Shadow Shadow `json:"shadow"`
}

// Topic is a logic topic: the same stream of messages on one or more
// clusters (two data centres in the usual setup).
type Topic struct {
	Clusters []Cluster `json:"clusters"`
}

// Cluster is one RocketMQ cluster serving a logic topic.
type Cluster struct {
	// Name identifies the cluster in metrics and logs, unique per topic.
	Name string `json:"name"`
	// Protocol is the wire the cluster speaks: ProtocolGRPC (RocketMQ 5's
	// gRPC protocol, through a proxy; the default, also meant by "") or
	// ProtocolRemoting (the classic protocol of 4.x and 5.x brokers,
	// straight to the brokers found through name servers).
	Protocol Protocol `json:"protocol,omitempty"`
	// Endpoints are "host:port" addresses: the proxies of a gRPC cluster,
	// the name servers of a remoting cluster.
	Endpoints []string `json:"endpoints"`
	// Topic is the physical topic on this cluster. Parse sets it to the
	// logic topic's name when the document leaves it out; a Config built in
	// Go must set it.
	Topic string `json:"topic,omitempty"`
	// Weight is the share of traffic in its priority group when healthy.
	// Parse sets it to DefaultWeight (100) when the document leaves it out;
	// in a Config built in Go, 0 means what it means in a document: the
	// cluster is drained without being removed.
	Weight int `json:"weight"`
	// Priority orders the clusters: 0 is tried first (the local data
	// centre); traffic spills to higher numbers as health drops.
	Priority int `json:"priority"`
	// TLS turns on TLS to the endpoints.
	TLS bool `json:"tls,omitempty"`
	// Credentials names an entry of Config.Credentials; empty means none.
	Credentials string `json:"credentials,omitempty"`
	// ShadowTopic is the physical topic of shadow traffic on this cluster;
	// empty means the shadow naming rule, if any (see Shadow).
	ShadowTopic string `json:"shadowTopic,omitempty"`
}

// Protocol names the wire a cluster speaks.
type Protocol string

// Protocols.
const (
	// ProtocolGRPC is RocketMQ 5's gRPC protocol, spoken to a proxy. The
	// empty Protocol means it too.
	ProtocolGRPC Protocol = "grpc"
	// ProtocolRemoting is RocketMQ's classic remoting protocol, spoken to
	// the name servers and then to each broker directly (4.x and 5.x).
	ProtocolRemoting Protocol = "remoting"
)

// Remoting reports whether p is ProtocolRemoting.
func (p Protocol) Remoting() bool { return p == ProtocolRemoting }

// UnmarshalJSON fills in the cluster's defaults before decoding, so an
// explicit "weight": 0 (drain) differs from a missing weight (100).
func (c *Cluster) UnmarshalJSON(b []byte) error {
	type plain Cluster
	p := plain{Weight: DefaultWeight}
	if err := decodeStrict(b, &p); err != nil {
		return err
	}
	*c = Cluster(p)
	return nil
}

// Batching of the producer.
type Batching struct {
	// Enabled turns batching on (default true).
	Enabled bool `json:"enabled"`
	// MaxDelay is the longest a message waits for company (default 10ms).
	MaxDelay Duration `json:"maxDelay"`
	// BatchMaxBytes flushes a batch when it reaches this size (default 256 KiB).
	BatchMaxBytes int `json:"batchMaxBytes"`
	// TotalBatchMaxBytes caps all buffered bytes of a producer together;
	// senders block beyond it (default 32 MiB).
	TotalBatchMaxBytes int64 `json:"totalBatchMaxBytes"`
}

// Failover tunes the weighted health of endpoints. Weights are fractions
// of an endpoint's configured weight.
type Failover struct {
	// FailureFactor multiplies the weight on each failure (default 0.5).
	FailureFactor float64 `json:"failureFactor"`
	// Recovery is the fraction of the full weight restored per success
	// (default 0.01).
	Recovery float64 `json:"recovery"`
	// MinWeight is the floor, as a fraction of the full weight, that keeps
	// a failing endpoint eligible (default 0: it is only probed).
	MinWeight float64 `json:"minWeight"`
	// ProbeInterval is how often an endpoint at the floor is probed
	// (default 1s).
	ProbeInterval Duration `json:"probeInterval"`
	// SlowRequest: a request still unanswered after this long counts as a
	// failure of its broker even when its senders gave up first (their
	// deadlines shorter than timeouts.request), so that a hung broker is
	// left at the pace of short deadlines too. Default 500ms, as RocketMQ's
	// clients take a broker out after a send of 550 ms; zero in a Config
	// built in code means the default, negative never.
	SlowRequest Duration `json:"slowRequest"`
}

// Timeouts of the calls to RocketMQ.
type Timeouts struct {
	// Request bounds one RPC (default 3s).
	Request Duration `json:"request"`
	// SendDeadline bounds a Send with its retries when the caller's
	// context has no deadline (default 10s).
	SendDeadline Duration `json:"sendDeadline"`
}

// Credential is an access key pair. Its String method hides the secret so
// it never lands in a log by accident.
type Credential struct {
	AccessKey    string `json:"accessKey"`
	AccessSecret string `json:"accessSecret"`
}

// String shows the key and hides the secret.
func (c Credential) String() string {
	return fmt.Sprintf("{accessKey:%s accessSecret:<redacted>}", c.AccessKey)
}

// GoString hides the secret from %#v as well.
func (c Credential) GoString() string { return c.String() }

// Consumer holds the settings of one consumer group that may change live.
type Consumer struct {
	// Concurrency is the number of handlers running at once (default 16).
	Concurrency int `json:"concurrency"`
	// MaxAttempts is how many deliveries a message gets before it goes to
	// the dead-letter topic (default 16).
	MaxAttempts int `json:"maxAttempts"`
	// Lane is the lane of this group's instances that read this document;
	// empty is base.
	Lane string `json:"lane,omitempty"`
	// Mode is ModeDirect (default; empty means the same) or ModeProxy
	// (reserved).
	Mode string `json:"mode"`
}

// Lanes drives lane routing between the consumers of a group.
type Lanes struct {
	// Enabled turns routing on (default true). Off, every consumer handles
	// whatever it receives, whatever its lane: a kill switch.
	Enabled bool `json:"enabled"`
	// LeaseTTL is how long a consumer stays registered without renewing
	// (default 10s).
	LeaseTTL Duration `json:"leaseTTL"`
	// ForwardTimeout bounds one forwarded message (default 5s).
	ForwardTimeout Duration `json:"forwardTimeout"`
}

// Duration is a time.Duration written as a Go duration string ("10ms",
// "1.5s") in the document. Plain numbers are refused: their unit would be a
// guess.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string. Parse puts the field's path in
// front of its errors ("batching.maxDelay: got the number 10, ...").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) == 0 || b[0] != '"' || json.Unmarshal(b, &s) != nil {
		return fmt.Errorf("got %s, want a duration string such as \"10ms\" or \"2s\" (a bare number's unit would be a guess)", describe(b))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
