package broker

import (
	"crypto/tls"
	"net"

	"github.com/twinmq/twinmq/internal/remoting/wire"
)

// remotingListener serves TLS on lis when Security.TLS is set (RocketMQ's
// tlsMode=enforcing: a plaintext client's first frame fails the handshake
// and its connection is closed).
func remotingListener(lis net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return lis
	}
	return tls.NewListener(lis, cfg)
}

// authenticate checks a remoting request against Security.Auth (nil: no
// access control): the signature of every request, and the publish
// permission of a send. A refusal is NO_PERMISSION with the reason, as a
// RocketMQ 5 broker answers.
func (s *remotingServer) authenticate(req *wire.Command) *wire.Header {
	if s.b.auth == nil {
		return nil
	}
	topic := ""
	switch req.Code {
	case wire.CodeSendMessage, wire.CodeSendMessageV2, wire.CodeSendBatchMessage:
		topic = sendExt(req, wire.SendTopic, "topic")
	}
	if err := s.b.auth.CheckRemoting(req.Code, req.Ext, req.Body, topic); err != nil {
		return remErr(wire.RespNoPermission, "%v", err)
	}
	return nil
}
