package driver

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
)

// Header names and fixed values of the RocketMQ 5 gRPC protocol.
const (
	headerClientID      = "x-mq-client-id"
	headerLanguage      = "x-mq-language"
	headerProtocol      = "x-mq-protocol"
	headerClientVersion = "x-mq-client-version"
	headerRequestID     = "x-mq-request-id"
	headerDateTime      = "x-mq-date-time"
	headerNamespace     = "x-mq-namespace"
	headerAuthorization = "authorization"

	// languageHeader must be a remoting LanguageCode name: the proxy feeds
	// it to LanguageCode.valueOf, which knows GO but not GOLANG.
	languageHeader = "GO"
	protocolV2     = "v2"
	// ClientVersion is the version announced in x-mq-client-version and in
	// the Settings user agent. The proxy compares it with "5.0.3" and
	// treats older clients differently, so it must stay >= that.
	ClientVersion = "5.1.4"

	dateTimeLayout = "20060102T150405Z"
	signAlgorithm  = "MQv2-HMAC-SHA1"
)

// NewClientID returns an x-mq-client-id in the official clients' shape,
// host@pid@index@<base36 time>. The index is random rather than a process
// counter, so that no package state is needed; together with the
// microsecond timestamp it keeps ids of clients in one process distinct.
func NewClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.ReplaceAll(host, "@", "_")
	var b strings.Builder
	b.WriteString(host)
	b.WriteByte('@')
	b.WriteString(strconv.Itoa(os.Getpid()))
	b.WriteByte('@')
	b.WriteString(strconv.FormatUint(uint64(rand.Uint32N(1<<20)), 10))
	b.WriteByte('@')
	b.WriteString(strconv.FormatInt(time.Now().UnixMicro(), 36))
	return b.String()
}

// Sign returns the authorization header value for the given date-time
// header value: HMAC-SHA1 over dateTime under the secret key, in upper-case
// hex, in the format the proxy parses.
func Sign(c Credentials, dateTime string) string {
	mac := hmac.New(sha1.New, []byte(c.SecretKey))
	mac.Write([]byte(dateTime))
	sum := mac.Sum(nil)
	return signAlgorithm + " Credential=" + c.AccessKey +
		", SignedHeaders=" + headerDateTime +
		", Signature=" + strings.ToUpper(hex.EncodeToString(sum))
}

// headers builds the outgoing metadata of every call. The metadata changes
// only once per second (the date-time header and the signature over it), so
// one immutable metadata.MD is built per second and shared by every call in
// that second; only the request id is added per call. gRPC reads outgoing
// metadata without modifying it, which makes the sharing safe.
type headers struct {
	static []string // key/value pairs that never change
	creds  *Credentials
	snap   atomic.Pointer[headerSnap]
}

type headerSnap struct {
	unix int64
	md   metadata.MD
}

func newHeaders(clientID, namespace string, creds *Credentials) *headers {
	h := &headers{creds: creds}
	h.static = []string{
		headerClientID, clientID,
		headerLanguage, languageHeader,
		headerProtocol, protocolV2,
		headerClientVersion, ClientVersion,
	}
	if namespace != "" {
		h.static = append(h.static, headerNamespace, namespace)
	}
	return h
}

// metadataAt returns the shared metadata for the second of now.
func (h *headers) metadataAt(now time.Time) metadata.MD {
	sec := now.Unix()
	if s := h.snap.Load(); s != nil && s.unix == sec {
		return s.md
	}
	md := make(metadata.MD, len(h.static)/2+2)
	for i := 0; i < len(h.static); i += 2 {
		md[h.static[i]] = []string{h.static[i+1]}
	}
	dt := now.UTC().Format(dateTimeLayout)
	md[headerDateTime] = []string{dt}
	if h.creds != nil {
		md[headerAuthorization] = []string{Sign(*h.creds, dt)}
	}
	h.snap.Store(&headerSnap{unix: sec, md: md})
	return md
}

// outgoing attaches the headers of one call to ctx.
func (h *headers) outgoing(ctx context.Context) context.Context {
	ctx = metadata.NewOutgoingContext(ctx, h.metadataAt(time.Now()))
	return metadata.AppendToOutgoingContext(ctx, headerRequestID, newRequestID())
}

// newRequestID returns a random UUID (version 4) string; the server only
// logs it.
func newRequestID() string {
	var b [16]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i] = byte(hi >> (56 - 8*i))
		b[8+i] = byte(lo >> (56 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
