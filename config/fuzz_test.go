package config

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParse checks that Parse never panics, that every error it returns
// wraps ErrInvalidConfig, and that an accepted document survives Marshal and
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
