package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// Header names of the scheme.
const (
	HeaderAuthorization = "authorization"
	HeaderDateTime      = "x-mq-date-time"
	// Scheme is the only signing algorithm of RocketMQ 5 clients.
	Scheme = "MQv2-HMAC-SHA1"
)

// Sentinel errors; every error of Check is an *Error matching one of them.
var (
	// ErrUnauthorized: missing or wrong credentials (UNAUTHORIZED 40100).
	ErrUnauthorized = errors.New("auth: unauthorized")
	// ErrForbidden: valid credentials without the permission (FORBIDDEN
	// 40300).
	ErrForbidden = errors.New("auth: forbidden")
	// ErrMalformed: an authorization header that cannot be parsed. Check
	// reports it as ErrUnauthorized.
	ErrMalformed = errors.New("auth: malformed authorization header")
	// ErrInvalidConfig: a Config that cannot work.
	ErrInvalidConfig = errors.New("auth: invalid config")
)

// Error is a refused request.
type Error struct {
	Kind   error // ErrUnauthorized or ErrForbidden
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%v: %s", e.Kind, e.Reason) }

// Is matches the Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

func unauthorized(format string, args ...any) error {
	return &Error{Kind: ErrUnauthorized, Reason: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &Error{Kind: ErrForbidden, Reason: fmt.Sprintf(format, args...)}
}

// User is one access key with its permissions.
type User struct {
	AccessKey string
	SecretKey string
	// Super may do everything (RocketMQ's super user).
	Super bool
	// Publish: topics the user may send to. Entries are exact names, "*",
	// or a prefix followed by "*".
	Publish []string
	// Subscribe: topics the user may receive from.
	Subscribe []string
	// Groups: consumer groups the user may consume as.
	Groups []string
}

// Config configures an Authorizer.
type Config struct {
	Users []User
	// AuthenticationOnly checks credentials but grants every permission
	// (authorizationEnabled=false with authenticationEnabled=true).
	AuthenticationOnly bool
	// Whitelist names RPCs (for example "QueryRoute") that need no
	// credentials, as the proxy's authenticationWhitelist.
	Whitelist []string
	// Logger receives one debug line per refusal; nil means none.
	Logger *zap.Logger
}

// Authorizer checks requests against its users. It is immutable and safe
// for concurrent use.
type Authorizer struct {
	users     map[string]*User
	authOnly  bool
	whitelist map[string]bool
	log       *zap.Logger
}

// New validates cfg and returns an Authorizer.
func New(cfg Config) (*Authorizer, error) {
	a := &Authorizer{users: map[string]*User{}, authOnly: cfg.AuthenticationOnly, whitelist: map[string]bool{}, log: cfg.Logger}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	for i := range cfg.Users {
		u := cfg.Users[i]
		if u.AccessKey == "" || u.SecretKey == "" {
			return nil, fmt.Errorf("%w: user %d needs an access key and a secret key", ErrInvalidConfig, i)
		}
		if strings.ContainsAny(u.AccessKey, "/, =") {
			return nil, fmt.Errorf("%w: access key %q holds a character of the header syntax", ErrInvalidConfig, u.AccessKey)
		}
		if _, dup := a.users[u.AccessKey]; dup {
			return nil, fmt.Errorf("%w: access key %q listed twice", ErrInvalidConfig, u.AccessKey)
		}
		for _, list := range [][]string{u.Publish, u.Subscribe, u.Groups} {
			for _, p := range list {
				if p == "" || strings.Contains(strings.TrimSuffix(p, "*"), "*") {
					return nil, fmt.Errorf("%w: user %q: pattern %q (want a name, \"*\" or \"prefix*\")", ErrInvalidConfig, u.AccessKey, p)
				}
			}
		}
		u.Publish = append([]string(nil), u.Publish...)
		u.Subscribe = append([]string(nil), u.Subscribe...)
		u.Groups = append([]string(nil), u.Groups...)
		a.users[u.AccessKey] = &u
	}
	for _, w := range cfg.Whitelist {
		a.whitelist[w] = true
	}
	return a, nil
}

// Authorization is a parsed authorization header.
type Authorization struct {
	Scheme        string
	AccessKey     string
	SignedHeaders string
	Signature     []byte
}

// ParseAuthorization parses an authorization header value (see the package
// doc). Errors wrap ErrMalformed.
func ParseAuthorization(h string) (Authorization, error) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || scheme == "" {
		return Authorization{}, fmt.Errorf("%w: no scheme", ErrMalformed)
	}
	a := Authorization{Scheme: scheme}
	var sawCred, sawSig bool
	for _, item := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Credential":
			ak, _, _ := strings.Cut(strings.TrimSpace(v), "/")
			a.AccessKey = ak
			sawCred = true
		case "SignedHeaders":
			a.SignedHeaders = strings.TrimSpace(v)
		case "Signature":
			sig, err := hex.DecodeString(strings.TrimSpace(v))
			if err != nil {
				return Authorization{}, fmt.Errorf("%w: signature is not hex", ErrMalformed)
			}
			a.Signature = sig
			sawSig = true
		}
	}
	if !sawCred || a.AccessKey == "" {
		return Authorization{}, fmt.Errorf("%w: no credential", ErrMalformed)
	}
	if !sawSig || len(a.Signature) == 0 {
		return Authorization{}, fmt.Errorf("%w: no signature", ErrMalformed)
	}
	return a, nil
}

// Signature returns HMAC-SHA1(secretKey, dateTime), the bytes a client
// signs with.
func Signature(secretKey, dateTime string) []byte {
	m := hmac.New(sha1.New, []byte(secretKey))
	m.Write([]byte(dateTime))
	return m.Sum(nil)
}

// FormatAuthorization returns the header value the Go client sends.
func FormatAuthorization(accessKey, secretKey, dateTime string) string {
	return fmt.Sprintf("%s Credential=%s//Rocketmq, SignedHeaders=%s, Signature=%s",
		Scheme, accessKey, HeaderDateTime, hex.EncodeToString(Signature(secretKey, dateTime)))
}

// Authenticate returns the user whose credentials md carries.
func (a *Authorizer) Authenticate(md metadata.MD) (*User, error) {
	hs := md.Get(HeaderAuthorization)
	if len(hs) == 0 || strings.TrimSpace(hs[0]) == "" {
		return nil, unauthorized("no authorization header (username cannot be null)")
	}
	auth, err := ParseAuthorization(hs[0])
	if err != nil {
		return nil, unauthorized("%v", err)
	}
	if auth.Scheme != Scheme {
		return nil, unauthorized("unsupported signing scheme %q", auth.Scheme)
	}
	dts := md.Get(HeaderDateTime)
	if len(dts) == 0 || dts[0] == "" {
		return nil, unauthorized("no %s header to verify the signature with", HeaderDateTime)
	}
	u := a.users[auth.AccessKey]
	if u == nil {
		return nil, unauthorized("user %s is not found", auth.AccessKey)
	}
	if !hmac.Equal(Signature(u.SecretKey, dts[0]), auth.Signature) {
		return nil, unauthorized("check signature failed for %s", auth.AccessKey)
	}
	return u, nil
}

// Check authenticates the caller of rpc (the method name, e.g.
// "SendMessage") from the incoming metadata of ctx and authorizes req.
func (a *Authorizer) Check(ctx context.Context, rpc string, req any) error {
	md, _ := metadata.FromIncomingContext(ctx)
	var u *User
	if !a.whitelist[rpc] {
		var err error
		if u, err = a.Authenticate(md); err != nil {
			a.log.Debug("request refused", zap.String("rpc", rpc), zap.Error(err))
			return err
		}
	}
	if u == nil || u.Super || a.authOnly {
		return nil
	}
	if err := authorize(u, req); err != nil {
		a.log.Debug("request refused", zap.String("rpc", rpc), zap.String("user", u.AccessKey), zap.Error(err))
		return err
	}
	return nil
}

func match(patterns []string, name string) bool {
	for _, p := range patterns {
		if p == name || p == "*" || (strings.HasSuffix(p, "*") && strings.HasPrefix(name, p[:len(p)-1])) {
			return true
		}
	}
	return false
}

func (u *User) canPublish(topic string) error {
	if !match(u.Publish, topic) {
		return forbidden("%s has no permission to publish to topic %s", u.AccessKey, topic)
	}
	return nil
}

func (u *User) canSubscribeTopic(topic string) error {
	if !match(u.Subscribe, topic) {
		return forbidden("%s has no permission to subscribe to topic %s", u.AccessKey, topic)
	}
	return nil
}

func (u *User) canUseGroup(group string) error {
	if !match(u.Groups, group) {
		return forbidden("%s has no permission to consume as group %s", u.AccessKey, group)
	}
	return nil
}
