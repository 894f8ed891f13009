package lane

import (
	"strings"
	"testing"
)

// FuzzParse checks the parser's invariants on arbitrary input: it never
// panics, accepted names obey every limit and rebuild from their segments,
// and the chain of an accepted name is made of accepted names, each the
// parent of the one before, ending at base, and Resolve agrees with Chain.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "a", "a.x", "a.x.y", "A", "a..b", ".", "a.", "_a", "a-b_c.0",
		"l1.l2.l3.l4.l5.l6.l7.l8", "l1.l2.l3.l4.l5.l6.l7.l8.l9", strings.Repeat("a", 33), "é", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		segs, err := Parse(name)
		chain := Chain(name)
		if chain[len(chain)-1] != "" {
			t.Fatalf("chain of %q does not end at base: %q", name, chain)
		}
		if err != nil {
			if len(chain) != 1 {
				t.Fatalf("malformed %q has chain %q", name, chain)
			}
			return
		}
		if len(name) > MaxLength || len(segs) > MaxDepth {
			t.Fatalf("accepted %q beyond limits", name)
		}
		if strings.Join(segs, ".") != name {
			t.Fatalf("segments of %q do not rebuild it: %q", name, segs)
		}
		if len(chain) != len(segs)+1 || chain[0] != name {
			t.Fatalf("chain of %q is %q", name, chain)
		}
		if target, level := Resolve(name, Lanes()); target != "" || level != len(chain)-1 {
			t.Fatalf("Resolve(%q, nothing live) = %q, %d", name, target, level)
		}
		for i, l := range chain {
			if target, level := Resolve(name, Lanes(l)); target != l || level != i {
				t.Fatalf("Resolve(%q, {%q}) = %q, %d; want level %d", name, l, target, level, i)
			}
		}
		for i := 0; i+1 < len(chain); i++ {
			if err := Validate(chain[i]); err != nil {
				t.Fatalf("chain member %q of %q invalid: %v", chain[i], name, err)
			}
			if p, ok := Parent(chain[i]); !ok || p != chain[i+1] {
				t.Fatalf("parent of %q is %q, chain says %q", chain[i], p, chain[i+1])
			}
		}
	})
}
