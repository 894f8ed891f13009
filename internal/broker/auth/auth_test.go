package auth

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/twinmq/twinmq/internal/pb/rmqpb"
)

const dt = "20261122T010203Z"

func javaHeader(ak, sk, dateTime string) string {
	return "MQv2-HMAC-SHA1 Credential=" + ak + ", SignedHeaders=x-mq-date-time, Signature=" +
		strings.ToUpper(hex.EncodeToString(Signature(sk, dateTime)))
}

func TestParseAuthorizationClientFormats(t *testing.T) {
	goH := FormatAuthorization("AK1", "SK1", dt)
	require.Contains(t, goH, "Credential=AK1//Rocketmq")
	for _, h := range []string{goH, javaHeader("AK1", "SK1", dt), "  " + goH + "  "} {
		a, err := ParseAuthorization(h)
		require.NoError(t, err, h)
		require.Equal(t, Scheme, a.Scheme)
		require.Equal(t, "AK1", a.AccessKey)
		require.Equal(t, "x-mq-date-time", a.SignedHeaders)
		require.Equal(t, Signature("SK1", dt), a.Signature)
	}
	for _, h := range []string{
		"", "MQv2-HMAC-SHA1", "MQv2-HMAC-SHA1 Signature=00", "MQv2-HMAC-SHA1 Credential=AK",
		"MQv2-HMAC-SHA1 Credential=AK, Signature=zz", "MQv2-HMAC-SHA1 Credential=/x, Signature=00",
		"MQv2-HMAC-SHA1 Credential=AK, Signature=",
	} {
		_, err := ParseAuthorization(h)
		require.ErrorIs(t, err, ErrMalformed, "%q", h)
	}
}

func testAuthorizer(t *testing.T) *Authorizer {
	a, err := New(Config{Users: []User{
		{AccessKey: "admin", SecretKey: "adminSK", Super: true},
		{AccessKey: "pub", SecretKey: "pubSK", Publish: []string{"orders", "log-*"}},
		{AccessKey: "sub", SecretKey: "subSK", Subscribe: []string{"orders"}, Groups: []string{"billing"}},
	}, Whitelist: []string{"QueryRoute"}})
	require.NoError(t, err)
	return a
}

func ctxWith(kv ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
}

func signed(ak, sk string) context.Context {
	return ctxWith(HeaderAuthorization, FormatAuthorization(ak, sk, dt), HeaderDateTime, dt)
}

// publisher is a send decoded by other means than the generated types, as
// the broker's own: it names its topic through Publisher. An empty topic
// stands for a request without messages.
type publisher string

func (p publisher) PublishTopic() (string, bool) { return string(p), p != "" }

func send(topic string) *rmqpb.SendMessageRequest {
	return &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{Topic: &rmqpb.Resource{Name: topic}}}}
}

func TestAuthenticate(t *testing.T) {
	a := testAuthorizer(t)
	req := send("orders")
	require.NoError(t, a.Check(signed("pub", "pubSK"), "SendMessage", req))
	require.NoError(t, a.Check(ctxWith(HeaderAuthorization, javaHeader("pub", "pubSK", dt), HeaderDateTime, dt), "SendMessage", req))
	for name, ctx := range map[string]context.Context{
		"none":          context.Background(),
		"no header":     ctxWith(HeaderDateTime, dt),
		"no date":       ctxWith(HeaderAuthorization, FormatAuthorization("pub", "pubSK", dt)),
		"other date":    ctxWith(HeaderAuthorization, FormatAuthorization("pub", "pubSK", dt), HeaderDateTime, "20261122T010204Z"),
		"wrong secret":  signed("pub", "nope"),
		"unknown user":  signed("ghost", "pubSK"),
		"other scheme":  ctxWith(HeaderAuthorization, strings.Replace(FormatAuthorization("pub", "pubSK", dt), Scheme, "MQv2-HMAC-SHA256", 1), HeaderDateTime, dt),
		"garbage":       ctxWith(HeaderAuthorization, "Bearer x", HeaderDateTime, dt),
		"short sig":     ctxWith(HeaderAuthorization, "MQv2-HMAC-SHA1 Credential=pub, Signature=00", HeaderDateTime, dt),
		"other's creds": signed("sub", "pubSK"),
	} {
		err := a.Check(ctx, "SendMessage", req)
		require.ErrorIs(t, err, ErrUnauthorized, name)
		require.Equal(t, rmqpb.Code_UNAUTHORIZED, StatusCode(err), name)
	}
	// Whitelisted RPCs need no credentials.
	require.NoError(t, a.Check(context.Background(), "QueryRoute", &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: "orders"}}))
}

func TestAuthorizeRules(t *testing.T) {
	a := testAuthorizer(t)
	res := func(n string) *rmqpb.Resource { return &rmqpb.Resource{Name: n} }
	mq := func(topic string) *rmqpb.MessageQueue { return &rmqpb.MessageQueue{Topic: res(topic)} }
	pubSettings := func(topics ...string) *rmqpb.TelemetryCommand {
		p := &rmqpb.Publishing{}
		for _, t := range topics {
			p.Topics = append(p.Topics, res(t))
		}
		return &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{PubSub: &rmqpb.Settings_Publishing{Publishing: p}}}}
	}
	subSettings := func(group string, topics ...string) *rmqpb.TelemetryCommand {
		s := &rmqpb.Subscription{Group: res(group)}
		for _, t := range topics {
			s.Subscriptions = append(s.Subscriptions, &rmqpb.SubscriptionEntry{Topic: res(t)})
		}
		return &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{PubSub: &rmqpb.Settings_Subscription{Subscription: s}}}}
	}
	for _, tc := range []struct {
		user string
		rpc  string
		req  any
		ok   bool
	}{
		{"pub", "SendMessage", send("orders"), true},
		{"pub", "SendMessage", send("log-app"), true},
		{"pub", "SendMessage", send("payments"), false},
		{"sub", "SendMessage", send("orders"), false},
		{"admin", "SendMessage", send("anything"), true},
		{"pub", "SendMessage", publisher("orders"), true},
		{"pub", "SendMessage", publisher("payments"), false},
		{"sub", "SendMessage", publisher("orders"), false},
		{"sub", "SendMessage", publisher(""), true}, // no message: the broker refuses it
		{"pub", "EndTransaction", &rmqpb.EndTransactionRequest{Topic: res("orders")}, true},
		{"sub", "EndTransaction", &rmqpb.EndTransactionRequest{Topic: res("orders")}, false},
		{"pub", "RecallMessage", &rmqpb.RecallMessageRequest{Topic: res("payments")}, false},
		{"sub", "ReceiveMessage", &rmqpb.ReceiveMessageRequest{Group: res("billing"), MessageQueue: mq("orders")}, true},
		{"sub", "ReceiveMessage", &rmqpb.ReceiveMessageRequest{Group: res("other"), MessageQueue: mq("orders")}, false},
		{"sub", "ReceiveMessage", &rmqpb.ReceiveMessageRequest{Group: res("billing"), MessageQueue: mq("payments")}, false},
		{"pub", "ReceiveMessage", &rmqpb.ReceiveMessageRequest{Group: res("billing"), MessageQueue: mq("orders")}, false},
		{"sub", "AckMessage", &rmqpb.AckMessageRequest{Group: res("billing"), Topic: res("orders")}, true},
		{"pub", "AckMessage", &rmqpb.AckMessageRequest{Group: res("billing"), Topic: res("orders")}, false},
		{"sub", "QueryAssignment", &rmqpb.QueryAssignmentRequest{Group: res("billing"), Topic: res("orders")}, true},
		{"sub", "ForwardMessageToDeadLetterQueue", &rmqpb.ForwardMessageToDeadLetterQueueRequest{Group: res("x"), Topic: res("orders")}, false},
		{"sub", "ChangeInvisibleDuration", &rmqpb.ChangeInvisibleDurationRequest{Group: res("billing")}, true},
		{"pub", "ChangeInvisibleDuration", &rmqpb.ChangeInvisibleDurationRequest{Group: res("billing")}, false},
		{"pub", "Heartbeat", &rmqpb.HeartbeatRequest{ClientType: rmqpb.ClientType_PRODUCER}, true},
		{"pub", "Heartbeat", &rmqpb.HeartbeatRequest{ClientType: rmqpb.ClientType_SIMPLE_CONSUMER, Group: res("billing")}, false},
		{"sub", "Heartbeat", &rmqpb.HeartbeatRequest{ClientType: rmqpb.ClientType_PUSH_CONSUMER, Group: res("billing")}, true},
		{"pub", "NotifyClientTermination", &rmqpb.NotifyClientTerminationRequest{}, true},
		{"pub", "NotifyClientTermination", &rmqpb.NotifyClientTerminationRequest{Group: res("billing")}, false},
		{"pub", "QueryRoute", &rmqpb.QueryRouteRequest{Topic: res("orders")}, true},
		{"sub", "QueryRoute", &rmqpb.QueryRouteRequest{Topic: res("orders")}, true},
		{"sub", "QueryRoute", &rmqpb.QueryRouteRequest{Topic: res("payments")}, false},
		{"pub", "Telemetry", pubSettings("orders", "log-x"), true},
		{"pub", "Telemetry", pubSettings("orders", "payments"), false},
		{"sub", "Telemetry", subSettings("billing", "orders"), true},
		{"sub", "Telemetry", subSettings("billing", "orders", "payments"), false},
		{"pub", "Telemetry", &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{}}}, false},
		{"pub", "Telemetry", &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_ThreadStackTrace{ThreadStackTrace: &rmqpb.ThreadStackTrace{}}}, true},
	} {
		sk := map[string]string{"pub": "pubSK", "sub": "subSK", "admin": "adminSK"}[tc.user]
		// QueryRoute is whitelisted in testAuthorizer; use a strict one for it.
		az := a
		if tc.rpc == "QueryRoute" {
			var err error
			az, err = New(Config{Users: []User{
				{AccessKey: "pub", SecretKey: "pubSK", Publish: []string{"orders"}},
				{AccessKey: "sub", SecretKey: "subSK", Subscribe: []string{"orders"}},
			}})
			require.NoError(t, err)
		}
		err := az.Check(signed(tc.user, sk), tc.rpc, tc.req)
		if tc.ok {
			require.NoError(t, err, "%s %s %v", tc.user, tc.rpc, tc.req)
		} else {
			require.ErrorIs(t, err, ErrForbidden, "%s %s %v", tc.user, tc.rpc, tc.req)
			require.Equal(t, rmqpb.Code_FORBIDDEN, StatusCode(err))
		}
	}
}

func TestAuthenticationOnly(t *testing.T) {
	a, err := New(Config{Users: []User{{AccessKey: "u", SecretKey: "s"}}, AuthenticationOnly: true})
	require.NoError(t, err)
	require.NoError(t, a.Check(signed("u", "s"), "SendMessage", send("anything")))
	require.ErrorIs(t, a.Check(signed("u", "x"), "SendMessage", send("anything")), ErrUnauthorized)
}

func TestConfigValidated(t *testing.T) {
	for _, c := range []Config{
		{Users: []User{{AccessKey: "", SecretKey: "s"}}},
		{Users: []User{{AccessKey: "a", SecretKey: ""}}},
		{Users: []User{{AccessKey: "a/b", SecretKey: "s"}}},
		{Users: []User{{AccessKey: "a", SecretKey: "s"}, {AccessKey: "a", SecretKey: "t"}}},
		{Users: []User{{AccessKey: "a", SecretKey: "s", Publish: []string{"a*b"}}}},
		{Users: []User{{AccessKey: "a", SecretKey: "s", Groups: []string{""}}}},
	} {
		_, err := New(c)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", c)
	}
}

// FuzzParseAuthorization: the parser never panics, and what it accepts
// has an access key and a signature and parses the same once re-formatted.
func FuzzParseAuthorization(f *testing.F) {
	f.Add(FormatAuthorization("AK", "SK", dt))
	f.Add(javaHeader("AK", "SK", dt))
	f.Add("MQv2-HMAC-SHA1 Credential=AK//Rocketmq, SignedHeaders=x-mq-date-time, Signature=abcdef")
	f.Add("MQv2-HMAC-SHA1 Credential=, Signature=00")
	f.Add("MQv2-HMAC-SHA1  ,,,=,= ,Credential==/, Signature==")
	f.Add("x Signature=0g")
	f.Add("")
	f.Fuzz(func(t *testing.T, h string) {
		a, err := ParseAuthorization(h)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		require.NotEmpty(t, a.AccessKey)
		require.NotEmpty(t, a.Signature)
		require.NotContains(t, a.AccessKey, "/")
		again, err := ParseAuthorization(a.Scheme + " Credential=" + a.AccessKey + ", Signature=" + hex.EncodeToString(a.Signature))
		if strings.ContainsAny(a.AccessKey, ",") || strings.TrimSpace(a.AccessKey) != a.AccessKey {
			return // not representable in the canonical form
		}
		require.NoError(t, err)
		require.Equal(t, a.AccessKey, again.AccessKey)
		require.Equal(t, a.Signature, again.Signature)
	})
}
