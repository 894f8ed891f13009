package producer

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twinmq/twinmq/config"
)

// A client that a reload retired is closed by a timer once no send can use
// it any more. That close says goodbye to the client's brokers and, with a
// broker that hangs, waits up to the request timeout. Before the fix it ran
// on the timer's goroutine, owned by no one: Producer.Close returned while
// it still hung. Now Close cancels it and waits for it.
func TestCloseWaitsForARetiredClientBeingClosed(t *testing.T) {
	env := startEnv(t, "moves")
	ca := env.Clusters()[0]
	doc := func(c int) *config.Config {
		cfg := docFor(env, "moves")
		tc := cfg.Topics["moves"]
		tc.Clusters = tc.Clusters[c : c+1]
		cfg.Topics["moves"] = tc
		cfg.Timeouts.Request = config.Duration(2 * time.Second)
		cfg.Timeouts.SendDeadline = config.Duration(2 * time.Second)
		if c == 1 {
			// Other credentials need another client: the first is retired.
			cfg.Credentials = map[string]config.Credential{"other": {AccessKey: "ak", AccessSecret: "sk"}}
			tc.Clusters[0].Credentials = "other"
		}
		return cfg
	}
	versions := make(chan config.Version, 1)
	versions <- config.Version{Config: doc(0), Revision: "1"}
	p := newProducer(t, WithSource(config.Chan(versions)))
	_, err := p.Send(testCtx(t), &Message{Topic: "moves", Body: []byte("x")})
	require.NoError(t, err) // the client of ca is connected now

	for _, b := range ca.Brokers() {
		b.Pause()
		defer b.Resume()
	}
	versions <- config.Version{Config: doc(1), Revision: "2"}
	// The reload retires ca's client; its timer fires after the send
	// deadline plus the request timeout, and the close then hangs on ca.
	retired := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.retired)
	}
	require.Eventually(t, func() bool { return retired() == 1 }, 10*time.Second, 5*time.Millisecond, "the reload retired no client")
	require.Eventually(t, func() bool { return closingRetired() }, 10*time.Second, 5*time.Millisecond,
		"the retired client's close never started")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Close(ctx))
	require.False(t, closingRetired(), "Producer.Close returned while a retired client was still being closed")
}

// closingRetired reports whether a goroutine is closing a client that a
// reload retired.
func closingRetired() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "driver.(*Client).Close") && strings.Contains(g, "twinmq/producer.") &&
			!strings.Contains(g, "closeClients") {
			return true
		}
	}
	return false
}
