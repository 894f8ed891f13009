// Package wire is the codec of RocketMQ's classic "remoting" protocol, shared
// by the remoting driver (internal/remoting) and the embedded broker that
// serves the same protocol: frames, the two header serializations, request
// and response codes, the message properties string and the batch body.
//
// # Frame
//
// A frame is a big-endian int32 length (of everything after it), an int32
// whose top byte is the header's serialization (JSON 0, the binary
// "ROCKETMQ" form 1) and whose low 24 bits are the header's length, the
// header, then the body. DecodeFrame and DecodeHeader read both
// serializations; they never panic on garbage and fail with errors wrapping
// ErrMalformed (or ErrFrameTooLarge for a length over the limit).
//
// The JSON header is what fastjson writes for RemotingCommand: code,
// language as the enum's name ("GO"), version, opaque, flag, remark and
// extFields (a string map). A decoder accepts the language as a name or a
// number, as servers of either kind may answer. The binary header holds
// code and version in 16 bits: a larger code (the pop codes of RocketMQ 5,
// 200050 and up) can only be sent with JSON, and encoding refuses it.
// The encoders append into the caller's buffer (AppendFrameHead writes a
// frame up to its body without copying the header): the JSON one by hand,
// with encoding/json's escaping, the extFields in map order (servers read
// them into a map). A batch body can be written in one buffer without a
// string per message: StartBatchMessage, the pairs (CheckProperty,
// AppendProperty, in key order), FinishBatchMessage; AppendPropertyPairs
// reads a properties string into pairs (as DecodeProperties' map, with no
// map).
//
// # Signature
//
// Signature is the access-key signature of RocketMQ's AclClientRPCHook:
// HMAC-SHA1, keyed with the secret key, over the ext values sorted by key
// in Java's String order (UTF-16 code units) with Signature left out, then
// the body; Base64. The broker's ACL (1.0 and 2.0) recomputes the same.
// Values are signed as the server will decode them (an invalid UTF-8 byte
// as U+FFFD, as the JSON encoder writes it).
package wire
