package wire

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"hash"
	"slices"
	"unicode/utf8"
)

// The extFields of RocketMQ's access control (SessionCredentials).
const (
	ExtAccessKey     = "AccessKey"
	ExtSecurityToken = "SecurityToken"
	ExtSignature     = "Signature"
)

// Signature returns the signature RocketMQ's AclClientRPCHook puts in a
// request's Signature field, and its brokers (ACL 1.0 and ACL 2.0 alike)
// recompute: HMAC-SHA1 keyed with the secret key over the values of ext
// sorted by key (Signature itself left out; AccessKey and SecurityToken,
// when sent, included), then the body; Base64 with padding. ext must
// already hold every field that is sent.
func Signature(ext map[string]string, body []byte, secretKey string) string {
	return SignWith(hmac.New(sha1.New, []byte(secretKey)), ext, body)
}

// SignWith is Signature with a caller's HMAC-SHA1 keyed with the secret
// key (for reuse); it is Reset first.
func SignWith(mac hash.Hash, ext map[string]string, body []byte) string {
	mac.Reset()
	var arr [32]string
	keys := arr[:0]
	for k := range ext {
		if k != ExtSignature {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareJava)
	n := 0
	for _, k := range keys {
		n += len(ext[k])
	}
	content := make([]byte, 0, n+8)
	for _, k := range keys {
		content = appendWire(content, ext[k])
	}
	mac.Write(content)
	mac.Write(body)
	var sum [sha1.Size]byte
	return base64.StdEncoding.EncodeToString(mac.Sum(sum[:0]))
}

// appendWire appends the UTF-8 of s as the server decodes it from the
// header: each byte of invalid UTF-8 becomes U+FFFD, as the JSON encoder
// writes it.
func appendWire(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		return append(b, s...)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\uFFFD"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return b
}

// compareJava orders strings as Java's String.compareTo (the TreeMap the
// server sorts with): by UTF-16 code units, which differs from Go's byte
// order only between supplementary characters and U+E000..U+FFFF.
func compareJava(a, b string) int {
	for a != "" && b != "" {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return ua - ub
			}
			return lowUnit(ra) - lowUnit(rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

func firstUnit(r rune) int {
	if r >= 0x10000 {
		return 0xD800 + int((r-0x10000)>>10)
	}
	return int(r)
}

func lowUnit(r rune) int {
	if r >= 0x10000 {
		return 0xDC00 + int((r-0x10000)&0x3FF)
	}
	return 0
}
