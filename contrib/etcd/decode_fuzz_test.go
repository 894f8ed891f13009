package etcd

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeInstance feeds the registry's value decoder what any writer of
// the store could leave under a key: it must never panic, and whatever it
// accepts is a valid instance that encodes back to the same instance.
func FuzzDecodeInstance(f *testing.F) {
	f.Add([]byte(`{"group":"g","id":"i-1","lane":"a.x","addr":"10.0.0.1:7000","meta":{"zone":"dc1"}}`))
	f.Add([]byte(`{"group":"g","id":"i-1","lane":"","addr":"h:1"}`))
	f.Add([]byte(`{"group":"g","id":"i","lane":"A..B","addr":"h:1"}`))
	f.Add([]byte(`{"group":"g"} trailing`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := decodeInstance(b)
		if err != nil {
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("accepted an invalid instance %+v: %v", in, err)
		}
		enc, err := json.Marshal(record{Group: in.Group, ID: in.ID, Lane: in.Lane, Addr: in.Addr, Meta: in.Meta})
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeInstance(enc)
		if err != nil || !sameInstance(in, again) {
			t.Fatalf("round trip of %+v: %+v, %v", in, again, err)
		}
	})
}
