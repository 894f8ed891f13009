package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// decoder fills a document field by field and notes every problem with the
// path of its field, instead of stopping at the first as encoding/json does
// (whose errors from a field's own UnmarshalJSON, such as a duration written
// as a number, carry no path at all). It follows encoding/json's rules:
// keys match a field's json name case-insensitively, a key given twice
// keeps its last value (an object given twice is merged, as encoding/json
// decodes both into the same struct), null leaves a struct or a scalar as
// it was and empties a map or a slice, and a field that fails keeps the
// value it had (its default).
type decoder struct {
	ps problems
	// broken are the paths whose value could not be decoded; Validate's
	// problems at, above or below them are not reported (a default left in
	// place of a bad value says nothing about the document).
	broken []string
}

var (
	durationType = reflect.TypeFor[Duration]()
	clusterType  = reflect.TypeFor[Cluster]()
)

// fail records that the value at path could not be decoded.
func (d *decoder) fail(path, format string, args ...any) {
	d.ps.add(path, format, args...)
	d.broken = append(d.broken, path)
}

// value decodes raw (one well-formed JSON value) into v.
func (d *decoder) value(path string, raw []byte, v reflect.Value) {
	raw = bytes.TrimSpace(raw)
	isNull := string(raw) == "null"
	switch {
	case v.Type() == durationType:
		var dur Duration
		if err := dur.UnmarshalJSON(raw); err != nil {
			d.fail(path, "%v", err)
			return
		}
		v.Set(reflect.ValueOf(dur))
	case v.Kind() == reflect.Struct:
		if isNull {
			return
		}
		d.object(path, raw, func(key string, val []byte) {
			f, name, ok := field(v, key)
			if !ok {
				d.ps.add(join(path, key), "unknown field")
				return
			}
			d.value(join(path, name), val, f)
		})
	case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String:
		if isNull {
			v.SetZero()
			return
		}
		if !isObject(raw) {
			d.fail(path, "got %s, want an object", describe(raw))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		d.object(path, raw, func(key string, val []byte) {
			elem := reflect.New(v.Type().Elem()).Elem()
			d.value(join(path, key), val, elem)
			v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
		})
	case v.Kind() == reflect.Slice:
		if isNull {
			v.SetZero()
			return
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			d.fail(path, "got %s, want an array", describe(raw))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			elem := s.Index(i)
			if elem.Type() == clusterType {
				// As Cluster.UnmarshalJSON: a missing weight is the
				// default, an explicit 0 drains.
				elem.FieldByName("Weight").SetInt(DefaultWeight)
			}
			d.value(fmt.Sprintf("%s[%d]", path, i), item, elem)
		}
		v.Set(s)
	default:
		// Scalars: encoding/json's own rules and checks.
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				d.fail(path, "got %s, want %s", describe(raw), kindName(v.Kind()))
				return
			}
			d.fail(path, "%v", err)
		}
	}
}

// object calls fn for each member of the JSON object raw, in order; it
// records a problem if raw is not an object.
func (d *decoder) object(path string, raw []byte, fn func(key string, val []byte)) {
	if !isObject(raw) {
		d.fail(path, "got %s, want an object", describe(raw))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		d.fail(path, "%v", err)
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			d.fail(path, "%v", err)
			return
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			d.fail(join(path, key), "%v", err)
			return
		}
		fn(key, val)
	}
}

// field finds the struct field of v whose json name is key, exactly or
// else case-insensitively, and returns it with its json name.
func field(v reflect.Value, key string) (reflect.Value, string, bool) {
	t := v.Type()
	fold := -1
	var foldName string
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if name == key {
			return v.Field(i), name, true
		}
		if fold < 0 && strings.EqualFold(name, key) {
			fold, foldName = i, name
		}
	}
	if fold < 0 {
		return reflect.Value{}, "", false
	}
	return v.Field(fold), foldName, true
}

// join appends a key to a path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isObject(raw []byte) bool { return len(raw) > 0 && raw[0] == '{' }

// describe names the kind of a JSON value for a message, with the value
// itself when it is short.
func describe(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	short := func(kind string) string {
		if len(raw) <= 24 {
			return kind + " " + string(raw)
		}
		return kind
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return short("the string")
	case 't', 'f':
		return short("the boolean")
	case 'n':
		return "null"
	default:
		return short("the number")
	}
}

// kindName says what a Go kind takes, in the document's terms.
func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a " + k.String()
	}
}

// covers reports whether a problem at path q concerns the same value as a
// broken path p: the same field, one inside it, or a container of it.
func covers(p, q string) bool {
	within := func(inner, outer string) bool {
		return strings.HasPrefix(inner, outer) && len(inner) > len(outer) &&
			(inner[len(outer)] == '.' || inner[len(outer)] == '[')
	}
	return p == q || within(q, p) || within(p, q)
}
