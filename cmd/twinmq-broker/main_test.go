package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/twinmq/twinmq/internal/broker"
	"github.com/twinmq/twinmq/internal/pb/rmqpb"
	"github.com/twinmq/twinmq/internal/remoting"
)

func TestRunServesTheClusterUntilCancelled(t *testing.T) {
	cfgJSON := `{
	  "cluster": "c1", "dataDir": "` + t.TempDir() + `",
	  "brokers": [{"name": "b0", "listen": "127.0.0.1:0"}, {"name": "b1", "listen": "127.0.0.1:0"}],
	  "topics": [{"name": "orders", "queues": 2, "type": "FIFO"}],
	  "groups": [{"name": "billing", "retryBackoff": ["1s"]}]
	}`
	fc, err := loadConfig(strings.NewReader(cfgJSON))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan []string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, fc, zap.NewNop(), func(a []string) { addrs <- a }) }()
	var eps []string
	select {
	case eps = <-addrs:
	case err := <-done:
		t.Fatal(err)
	}
	require.Len(t, eps, 2)
	conn, err := grpc.NewClient(eps[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "cmd-test"), 5*time.Second)
	defer rcancel()
	resp, err := rmqpb.NewMessagingServiceClient(conn).QueryRoute(rctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: "orders"}})
	require.NoError(t, err)
	require.Equal(t, rmqpb.Code_OK, resp.GetStatus().GetCode())
	assert.Len(t, resp.GetMessageQueues(), 4)
	assert.Equal(t, []rmqpb.MessageType{rmqpb.MessageType_FIFO}, resp.GetMessageQueues()[0].GetAcceptMessageTypes())
	cancel()
	require.NoError(t, <-done)
}

func TestBadConfigs(t *testing.T) {
	for name, js := range map[string]string{
		"unknown field": `{"dataDir": "x", "brokers": [{"name": "b"}], "nope": 1}`,
		"no dir":        `{"brokers": [{"name": "b"}]}`,
		"no brokers":    `{"dataDir": "x"}`,
		"not json":      `{`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadConfig(strings.NewReader(js))
			assert.ErrorIs(t, err, errConfig)
		})
	}
	for name, js := range map[string]string{
		"bad type":    `{"dataDir": "x", "brokers": [{"name": "b"}], "topics": [{"name": "t", "type": "weird"}]}`,
		"bad backoff": `{"dataDir": "x", "brokers": [{"name": "b"}], "groups": [{"name": "g", "retryBackoff": ["soon"]}]}`,
		"bad flush":   `{"dataDir": "x", "brokers": [{"name": "b"}], "flush": "sometimes"}`,
		"bad name":    `{"dataDir": "x", "brokers": [{"name": "../b"}]}`,
		"bad limit":   `{"dataDir": "x", "brokers": [{"name": "b"}], "limits": {"minInvisible": "-1s"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			fc, err := loadConfig(strings.NewReader(js))
			require.NoError(t, err)
			_, err = fc.brokerConfigs(zap.NewNop(), nil)
			assert.ErrorIs(t, err, errConfig)
		})
	}
}

// One process per broker: -broker runs only the named broker, and its
// routes name every broker of the cluster at its advertise address (where
// clients reach it through a proxy).
func TestRunOneBrokerOfTheCluster(t *testing.T) {
	cfgJSON := `{
	  "cluster": "c1", "dataDir": "` + t.TempDir() + `",
	  "limits": {"minInvisible": "1s", "minLongPolling": "100ms"},
	  "brokers": [{"name": "b0", "listen": "127.0.0.1:0", "advertise": "127.0.0.1:7000"},
	              {"name": "b1", "listen": "127.0.0.1:0", "advertise": "127.0.0.1:7001"}],
	  "topics": [{"name": "orders", "queues": 2}]
	}`
	fc, err := loadConfig(strings.NewReader(cfgJSON))
	require.NoError(t, err)
	fc.only = "b1"
	cfgs, err := fc.brokerConfigs(zap.NewNop(), nil)
	require.NoError(t, err)
	require.Len(t, cfgs, 1)
	assert.Equal(t, time.Second, cfgs[0].Limits.MinInvisible)
	assert.Equal(t, 100*time.Millisecond, cfgs[0].Limits.MinLongPolling)

	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan []string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, fc, zap.NewNop(), func(a []string) { addrs <- a }) }()
	var eps []string
	select {
	case eps = <-addrs:
	case err := <-done:
		t.Fatal(err)
	}
	require.Len(t, eps, 1, "only b1 runs here")
	conn, err := grpc.NewClient(eps[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "cmd-test"), 5*time.Second)
	defer rcancel()
	resp, err := rmqpb.NewMessagingServiceClient(conn).QueryRoute(rctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: "orders"}})
	require.NoError(t, err)
	got := map[string]string{}
	for _, mq := range resp.GetMessageQueues() {
		a := mq.GetBroker().GetEndpoints().GetAddresses()[0]
		got[mq.GetBroker().GetName()] = fmt.Sprintf("%s:%d", a.GetHost(), a.GetPort())
	}
	assert.Equal(t, map[string]string{"b0": "127.0.0.1:7000", "b1": "127.0.0.1:7001"}, got)
	cancel()
	require.NoError(t, <-done)

	fc.only = "b9"
	_, err = fc.brokerConfigs(zap.NewNop(), nil)
	assert.ErrorIs(t, err, errConfig)
}

func TestExampleConfigIsValid(t *testing.T) {
	f, err := os.Open("example.json")
	require.NoError(t, err)
	defer f.Close()
	fc, err := loadConfig(f)
	require.NoError(t, err)
	cfgs, err := fc.brokerConfigs(zap.NewNop(), nil)
	require.NoError(t, err)
	require.Len(t, cfgs, 2)
	for _, c := range cfgs {
		_, err := broker.New(c)
		require.NoError(t, err)
	}
}

func TestMetricsIncludeGoRuntimeAndProcess(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsAddr := lis.Addr().String()
	require.NoError(t, lis.Close())
	fc, err := loadConfig(strings.NewReader(`{
	  "cluster": "c1", "dataDir": "` + t.TempDir() + `", "metricsListen": "` + metricsAddr + `",
	  "brokers": [{"name": "b0", "listen": "127.0.0.1:0"}],
	  "topics": [{"name": "orders", "queues": 1}]
	}`))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- run(ctx, fc, zap.NewNop(), func([]string) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		assert.Contains(t, string(body), "\n"+name+" ", name)
	}
	cancel()
	require.NoError(t, <-done)
}

// A broker with remotingListen takes sends over remoting, routed by the
// process's name server.
func TestRemotingListenAndNameServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nsAddr := lis.Addr().String()
	require.NoError(t, lis.Close())
	fc, err := loadConfig(strings.NewReader(`{
	  "cluster": "c1", "dataDir": "` + t.TempDir() + `", "nameServerListen": "` + nsAddr + `",
	  "brokers": [{"name": "b0", "listen": "127.0.0.1:0", "remotingListen": "127.0.0.1:0"}],
	  "topics": [{"name": "orders", "queues": 2}]
	}`))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- run(ctx, fc, zap.NewNop(), func([]string) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	c := remoting.New()
	ns, err := remoting.NewNameServer(c, []string{nsAddr})
	require.NoError(t, err)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	r, err := ns.Route(rctx, "orders")
	require.NoError(t, err)
	qs := r.WriteQueues()
	require.Len(t, qs, 2)
	res, err := c.Send(rctx, remoting.NewIDGenerator(), remoting.SendTarget{Addr: qs[1].Addr, BrokerName: qs[1].BrokerName, QueueID: 1, ProducerGroup: "p"},
		&remoting.Message{Topic: "orders", Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, int32(1), res.QueueID)
	require.Equal(t, int64(0), res.QueueOffset)
	require.NoError(t, c.Close())
	cancel()
	require.NoError(t, <-done)
}
