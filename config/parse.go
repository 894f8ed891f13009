package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// MaxDocumentBytes bounds a document: a config is kilobytes, and a source
// must never read an unbounded file into memory because someone pointed it
// at the wrong path.
const MaxDocumentBytes = 4 << 20

// Default returns a document with every default filled in and no topics.
func Default() *Config {
	return &Config{
		Batching: Batching{
			Enabled:            true,
			MaxDelay:           Duration(DefaultMaxDelay),
			BatchMaxBytes:      DefaultBatchMaxBytes,
			TotalBatchMaxBytes: DefaultTotalBatchMaxBytes,
		},
		Failover: Failover{
			FailureFactor: DefaultFailureFactor,
			Recovery:      DefaultRecovery,
			ProbeInterval: Duration(DefaultProbeInterval),
			SlowRequest:   Duration(DefaultSlowRequest),
		},
		Timeouts: Timeouts{
			Request:      Duration(DefaultRequestTimeout),
			SendDeadline: Duration(DefaultSendDeadline),
		},
		Lanes: Lanes{
			Enabled:        true,
			LeaseTTL:       Duration(DefaultLeaseTTL),
			ForwardTimeout: Duration(DefaultForwardTimeout),
		},
		Shadow: Shadow{Enabled: true},
	}
}

// Parse decodes a JSON document and fills in defaults. It refuses unknown
// fields (a misspelt "maxDelay" must not silently become the default),
// trailing data, wrong types and duration numbers, with errors wrapping
// ErrInvalidConfig. A document that is well-formed JSON but has such
// problems gets a *ValidationError that lists every one of them by path
// ("batching.maxDelay"), followed by the rules the rest of the document
// breaks (Validate's problems, except those about a field that could not be
// decoded), so that one round of fixes mends them all. A document that
// decodes is not checked: call Validate, or let a Watcher do both.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("document of %d bytes exceeds %d: %w", len(data), MaxDocumentBytes, ErrInvalidConfig)
	}
	// Syntax first, with encoding/json's position in the message: the
	// field-by-field decoding below takes well-formed values only.
	var raw json.RawMessage
	if err := decodeStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := Default()
	var d decoder
	d.value("", raw, reflect.ValueOf(c).Elem())
	fillIn(c)
	if len(d.ps) == 0 {
		return c, nil
	}
	ps := d.ps
	var ve *ValidationError
	if errors.As(c.Validate(), &ve) {
	rules:
		for _, q := range ve.Problems {
			for _, b := range d.broken {
				if covers(b, q.Path) {
					continue rules
				}
			}
			ps = append(ps, q)
		}
	}
	return nil, &ValidationError{Problems: ps}
}

// fillIn sets the defaults that depend on where a value sits: a cluster's
// physical topic and a consumer group's settings.
func fillIn(c *Config) {
	for name, t := range c.Topics {
		for i := range t.Clusters {
			if t.Clusters[i].Topic == "" {
				t.Clusters[i].Topic = name
			}
		}
	}
	for g, cs := range c.Consumers {
		if cs.Concurrency == 0 {
			cs.Concurrency = DefaultConcurrency
		}
		if cs.MaxAttempts == 0 {
			cs.MaxAttempts = DefaultMaxAttempts
		}
		if cs.Mode == "" {
			cs.Mode = ModeDirect
		}
		c.Consumers[g] = cs
	}
}

// Load is Parse followed by Validate: either error lists every problem of
// the document.
func Load(data []byte) (*Config, error) {
	c, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and anything after the value.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty document")
		}
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the document")
	}
	return nil
}

// Marshal encodes the document as indented JSON that Parse reads back to an
// equal Config (secrets included: write it only where the source was).
func (c *Config) Marshal() ([]byte, error) {
	return json.MarshalIndent(c, "", "  ")
}

// Clone returns a deep copy, for deriving a new version from a shared one.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	out := *c
	if c.Topics != nil {
		out.Topics = make(map[string]Topic, len(c.Topics))
		for name, t := range c.Topics {
			cl := make([]Cluster, len(t.Clusters))
			for i, k := range t.Clusters {
				k.Endpoints = append([]string(nil), k.Endpoints...)
				cl[i] = k
			}
			if t.Clusters == nil {
				cl = nil
			}
			out.Topics[name] = Topic{Clusters: cl}
		}
	}
	if c.Credentials != nil {
		out.Credentials = make(map[string]Credential, len(c.Credentials))
		for k, v := range c.Credentials {
			out.Credentials[k] = v
		}
	}
	if c.Consumers != nil {
		out.Consumers = make(map[string]Consumer, len(c.Consumers))
		for k, v := range c.Consumers {
			out.Consumers[k] = v
		}
	}
	return &out
}
