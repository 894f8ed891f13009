package auth

import (
	"crypto/hmac"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// CheckRemoting authenticates a request of RocketMQ's classic remoting
// protocol, signed as RocketMQ's AclClientRPCHook signs it: the AccessKey
// ext field names the user, the Signature field is wire.Signature of the
// other fields and the body under the user's secret key (what a RocketMQ
// 5 broker with ACL 2.0 checks). Unless AuthenticationOnly, a request that
// sends to a topic (publishTopic, "" for others) is also authorized. Errors
// are *Error matching ErrUnauthorized or ErrForbidden.
func (a *Authorizer) CheckRemoting(code int32, ext map[string]string, body []byte, publishTopic string) error {
	err := a.checkRemoting(ext, body, publishTopic)
	if err != nil {
		a.log.Debug("remoting request refused", zap.Int32("code", code), zap.String("user", ext[wire.ExtAccessKey]), zap.Error(err))
	}
	return err
}

func (a *Authorizer) checkRemoting(ext map[string]string, body []byte, publishTopic string) error {
	ak := ext[wire.ExtAccessKey]
	if ak == "" {
		return unauthorized("no %s field (username cannot be null)", wire.ExtAccessKey)
	}
	u := a.users[ak]
	if u == nil {
		return unauthorized("user %s is not found", ak)
	}
	sig := ext[wire.ExtSignature]
	if sig == "" || !hmac.Equal([]byte(sig), []byte(wire.Signature(ext, body, u.SecretKey))) {
		return unauthorized("check signature failed for %s", ak)
	}
	if u.Super || a.authOnly || publishTopic == "" {
		return nil
	}
	return u.canPublish(publishTopic)
}
