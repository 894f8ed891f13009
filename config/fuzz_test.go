package config

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParse checks that Parse never panics, that it accepts exactly the
// documents encoding/json's strict decoding accepts, into the same Config,
// that every error it returns wraps ErrInvalidConfig, and that an accepted document survives Marshal and
// Parse unchanged (an empty map may come back nil), with the same Validate verdict.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		goodDoc,
		`{}`,
		`{"topics": {"t": {"clusters": [{"name": "a", "endpoints": ["h:1"]}]}}}`,
		`{"topics": {"t": {"clusters": [{"name": "a", "endpoints": ["h:1"], "weight": 0}]}}}`,
		`{"batching": {"maxDelay": "1h"}, "timeouts": {"request": "-1s"}}`,
		`{"batching": {"maxDelay": 10}}`,
		`{"consumers": {"g": {"lane": "A..b", "mode": "proxy"}}}`,
		`{"BATCHING": {"MaxDelay": "1ms"}, "batching": {"enabled": false}}`,
		`{"topics": {"t": {"clusters": [{"name": "a"}, null, {"weight": 0}]}}, "topics": {"u": {"clusters": null}}}`,
		`{"batching": {"maxDelay": null}}`,
		`{"batching": null, "credentials": {"k": null}, "consumers": {"g": null}}`,
		`{"batching": {"batchMaxBytes": 1.5, "totalBatchMaxBytes": 1e3, "maxDelay": 10}, "lanes": {"leaseTTL": "x"}}`,
		`{"topics": {"t": {"clusters": [{"name": "a", "endpoints": "h:1", "weight": "9"}]}}}`,
		`{"failover": {"minWeight": -0, "recovery": 1E-2}, "timeouts": []}`,
		`{"credentials": {"": {}}}`,
		`{"topics": null, "lanes": null}`,
		`{} []`,
		`[`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		// Parse decodes field by field to report every problem; it must
		// accept and refuse what encoding/json's strict decoding does, and
		// give the same document.
		var want *Config
		if len(data) <= MaxDocumentBytes {
			want = Default()
			if decodeStrict(data, want) == nil {
				fillIn(want)
			} else {
				want = nil
			}
		}
		switch {
		case err == nil && want == nil:
			t.Fatalf("Parse accepted what encoding/json refuses: %s", data)
		case err != nil && want != nil:
			t.Fatalf("Parse refused what encoding/json accepts: %v", err)
		case err == nil:
			if d := cmp.Diff(want, c); d != "" {
				t.Fatalf("Parse and encoding/json differ (-json +Parse)\n%s", d)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
			return
		}
		verr := c.Validate()
		if verr != nil && !errors.Is(verr, ErrInvalidConfig) {
			t.Fatalf("validate error does not wrap ErrInvalidConfig: %v", verr)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if d := cmp.Diff(c, back, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round trip differs (-first +second)\n%s", d)
		}
		if (back.Validate() == nil) != (verr == nil) {
			t.Fatalf("validate verdict changed across round trip")
		}
	})
}
