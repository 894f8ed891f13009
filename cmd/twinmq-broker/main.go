// Command twinmq-broker runs one cluster of twinmq brokers standalone: each
// broker serves the RocketMQ 5 gRPC protocol on its own address over its own
// store, and lists the other brokers of the cluster in its routes.
//
// Usage:
//
//	twinmq-broker -config cluster.json [-broker broker-0]
//
// With -broker, the process runs only the named broker of the config and
// lists the others as its peers, at their "advertise" address (else their
// "listen" address): one process per broker, each of which can be killed
// and restarted on its own.
//
// The JSON config (unknown fields are rejected; example.json next to this
// file is a complete one):
//
//	{
//	  "cluster": "cluster-a",
//	  "dataDir": "twinmq-data",
//	  "flush": "async",
//	  "strictGroups": false,
//	  "logLevel": "info",
//	  "metricsListen": "127.0.0.1:9464",
//	  "brokers": [{"name": "broker-0", "listen": "127.0.0.1:18081"}],
//	  "topics": [{"name": "orders", "queues": 8, "type": "NORMAL", "batchCQ": false}],
//	  "groups": [{"name": "billing", "maxDeliveryAttempts": 17, "fifo": false, "retryBackoff": ["1s", "5s"]}]
//	}
//
// A broker's optional "advertise" is the address its routes name for it
// (default: where it listens); set it when clients reach the broker
// through a proxy. The optional "limits": {"minInvisible": "1s",
// "minLongPolling": "100ms"} lowers the broker's floors under a
// consumer's invisible time and long polling (defaults 10s and 5s, as a
// RocketMQ proxy), for tests that need redeliveries to come quickly.
//
// Each broker keeps its data in dataDir/<broker name>. flush is "async"
// (periodic fsync) or "sync" (a send returns after its fsync). Topic types
// are NORMAL, FIFO, DELAY, TRANSACTION or MIXED. metricsListen, when set,
// serves Prometheus metrics on /metrics: the brokers' twinmq_broker_*, and
// the process's Go runtime (go_*) and process (process_*) metrics.
//
// Optional keys: "tls": {"certFile": "...", "keyFile": "..."} serves TLS
// (PEM files) on every port, remoting and name server included; "users":
// [{"accessKey", "secretKey", "super", "publish", "subscribe", "groups"}]
// turns on access-key authentication (on the remoting port: the classic
// signature of every request) and the ACL
// (topic and group lists take names, "*" or "prefix*"; with
// "authenticationOnly": true every authenticated user may do everything);
// "transactions": {"timeout": "6s", "checkInterval": "30s", "maxChecks": 15}
// tunes the check-back of orphaned transactions.
//
// A broker's optional "remotingListen" also serves RocketMQ's classic
// remoting protocol there (route lookup, heartbeats, single and batch
// sends) from the same store; the optional top-level "nameServerListen"
// runs a name server whose routes name the remoting addresses of the
// brokers of this process.
//
// It stops cleanly (consumer progress written, stores closed) on SIGINT or
// SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/twinmq/twinmq/internal/broker"
	"github.com/twinmq/twinmq/internal/store"
)

type fileConfig struct {
	Cluster       string `json:"cluster"`
	DataDir       string `json:"dataDir"`
	Flush         string `json:"flush"`
	StrictGroups  bool   `json:"strictGroups"`
	LogLevel      string `json:"logLevel"`
	MetricsListen string `json:"metricsListen"`
	// NameServerListen, when set, runs a remoting name server there.
	NameServerListen string        `json:"nameServerListen"`
	Brokers          []brokerEntry `json:"brokers"`
	Topics           []topicEntry  `json:"topics"`
	Groups           []groupEntry  `json:"groups"`
	// TLS, users and transaction checks: see security.go.
	TLS                *tlsEntry         `json:"tls"`
	Users              []userEntry       `json:"users"`
	AuthenticationOnly bool              `json:"authenticationOnly"`
	Transactions       *transactionEntry `json:"transactions"`
	Limits             *limitsEntry      `json:"limits"`

	// only, when set, is the one broker this process runs (-broker).
	only string
}

type limitsEntry struct {
	MinInvisible   string `json:"minInvisible"`
	MinLongPolling string `json:"minLongPolling"`
}

type brokerEntry struct {
	Name      string `json:"name"`
	Listen    string `json:"listen"`
	Advertise string `json:"advertise"`
	// RemotingListen, when set, serves the remoting protocol there.
	RemotingListen string `json:"remotingListen"`
}

type topicEntry struct {
	Name    string `json:"name"`
	Queues  int    `json:"queues"`
	Type    string `json:"type"`
	BatchCQ bool   `json:"batchCQ"`
}

type groupEntry struct {
	Name                string   `json:"name"`
	MaxDeliveryAttempts int      `json:"maxDeliveryAttempts"`
	FIFO                bool     `json:"fifo"`
	RetryBackoff        []string `json:"retryBackoff"`
}

var errConfig = errors.New("twinmq-broker: bad config")

func loadConfig(r io.Reader) (*fileConfig, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var fc fileConfig
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if fc.DataDir == "" {
		return nil, fmt.Errorf("%w: dataDir is required", errConfig)
	}
	if len(fc.Brokers) == 0 {
		return nil, fmt.Errorf("%w: no brokers", errConfig)
	}
	return &fc, nil
}

// brokerConfigs turns the file into one validated config per broker.
func (fc *fileConfig) brokerConfigs(log *zap.Logger, reg prometheus.Registerer) ([]broker.Config, error) {
	var topics []broker.Topic
	for _, t := range fc.Topics {
		typ, err := broker.ParseMessageType(t.Type)
		if err != nil {
			return nil, fmt.Errorf("%w: topic %s: %w", errConfig, t.Name, err)
		}
		topics = append(topics, broker.Topic{Name: t.Name, Queues: t.Queues, Type: typ, BatchCQ: t.BatchCQ})
	}
	var groups []broker.Group
	for _, g := range fc.Groups {
		var backoff []time.Duration
		for _, s := range g.RetryBackoff {
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("%w: group %s: retryBackoff %q: %w", errConfig, g.Name, s, err)
			}
			backoff = append(backoff, d)
		}
		groups = append(groups, broker.Group{Name: g.Name, MaxDeliveryAttempts: g.MaxDeliveryAttempts, FIFO: g.FIFO, RetryBackoff: backoff})
	}
	var flush store.FlushMode
	switch fc.Flush {
	case "", "async":
		flush = store.FlushAsync
	case "sync":
		flush = store.FlushSync
	default:
		return nil, fmt.Errorf("%w: flush %q (want async or sync)", errConfig, fc.Flush)
	}
	sec, tx, err := fc.security()
	if err != nil {
		return nil, err
	}
	var limits broker.Limits
	if l := fc.Limits; l != nil {
		for _, f := range []struct {
			key string
			val string
			dst *time.Duration
		}{{"minInvisible", l.MinInvisible, &limits.MinInvisible}, {"minLongPolling", l.MinLongPolling, &limits.MinLongPolling}} {
			if f.val == "" {
				continue
			}
			d, err := time.ParseDuration(f.val)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%w: limits.%s %q (want a positive duration)", errConfig, f.key, f.val)
			}
			*f.dst = d
		}
	}
	var out []broker.Config
	found := false
	for _, b := range fc.Brokers {
		if b.Name == "" || filepath.Base(b.Name) != b.Name {
			return nil, fmt.Errorf("%w: broker name %q must be a plain file name", errConfig, b.Name)
		}
		if fc.only != "" && b.Name != fc.only {
			continue
		}
		found = true
		out = append(out, broker.Config{
			Cluster: fc.Cluster, Name: b.Name, Listen: b.Listen, Advertise: b.Advertise, RemotingListen: b.RemotingListen,
			DataDir: filepath.Join(fc.DataDir, b.Name), Topics: topics, Groups: groups,
			StrictGroups: fc.StrictGroups, Store: store.Options{Flush: flush},
			Security: sec, Transactions: tx, Limits: limits,
			Logger: log, Registerer: reg,
		})
	}
	if !found {
		return nil, fmt.Errorf("%w: -broker %q is not in the config", errConfig, fc.only)
	}
	return out, nil
}

// peers lists every broker of the config as the routes name it: at its
// advertise address, else where it runs in this process (started), else
// its configured listen address.
func (fc *fileConfig) peers(started map[string]string) []broker.Peer {
	out := make([]broker.Peer, 0, len(fc.Brokers))
	for _, b := range fc.Brokers {
		ep := b.Advertise
		if ep == "" {
			ep = started[b.Name]
		}
		if ep == "" {
			ep = b.Listen
		}
		out = append(out, broker.Peer{Name: b.Name, Endpoint: ep})
	}
	return out
}

func newLogger(level string) (*zap.Logger, error) {
	lvl := zapcore.InfoLevel
	if level != "" {
		if err := lvl.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("%w: logLevel %q: %w", errConfig, level, err)
		}
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

// run starts the cluster and serves until ctx ends. ready, if not nil,
// receives the brokers' addresses once all serve.
func run(ctx context.Context, fc *fileConfig, log *zap.Logger, ready func(addrs []string)) error {
	reg := prometheus.NewRegistry()
	// The process's own health beside the brokers': Go runtime (goroutines,
	// GC, heap) and process (CPU, memory, descriptors) metrics.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfgs, err := fc.brokerConfigs(log, reg)
	if err != nil {
		return err
	}
	var brokers []*broker.Broker
	stopAll := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		var errs []error
		for _, b := range brokers {
			errs = append(errs, b.Close(sctx))
		}
		return errors.Join(errs...)
	}
	for _, cfg := range cfgs {
		b, err := broker.New(cfg)
		if err != nil {
			return errors.Join(err, stopAll())
		}
		if err := b.Start(ctx); err != nil {
			return errors.Join(err, stopAll())
		}
		brokers = append(brokers, b)
	}
	started := map[string]string{}
	addrs := make([]string, len(brokers))
	for i, b := range brokers {
		started[b.Name()] = b.Addr()
		addrs[i] = b.Addr()
	}
	peers := fc.peers(started)
	for _, b := range brokers {
		if err := b.SetPeers(peers); err != nil {
			return errors.Join(err, stopAll())
		}
	}
	if fc.NameServerListen != "" {
		var nsTLS *tls.Config // the brokers' TLS: a TLS client dials both alike
		if len(cfgs) > 0 {
			nsTLS = cfgs[0].Security.TLS
		}
		ns, err := broker.StartNameServerTLS(fc.NameServerListen, func() []*broker.Broker { return brokers }, nsTLS)
		if err != nil {
			return errors.Join(err, stopAll())
		}
		defer func() { _ = ns.Close() }()
		log.Info("name server up", zap.String("addr", ns.Addr()))
	}
	var srv *http.Server
	if fc.MetricsListen != "" {
		lis, err := net.Listen("tcp", fc.MetricsListen)
		if err != nil {
			return errors.Join(fmt.Errorf("metrics listen: %w", err), stopAll())
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
	}
	log.Info("cluster up", zap.String("cluster", fc.Cluster), zap.Strings("endpoints", addrs))
	if ready != nil {
		ready(addrs)
	}
	<-ctx.Done()
	log.Info("stopping")
	if srv != nil {
		_ = srv.Close()
	}
	return stopAll()
}

func main() {
	path := flag.String("config", "", "path of the JSON cluster config")
	only := flag.String("broker", "", "run only this broker of the config (default: all)")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "twinmq-broker: -config is required")
		os.Exit(2)
	}
	f, err := os.Open(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "twinmq-broker:", err)
		os.Exit(1)
	}
	fc, err := loadConfig(f)
	_ = f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fc.only = *only
	log, err := newLogger(fc.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, fc, log, nil); err != nil {
		log.Error("twinmq-broker failed", zap.Error(err))
		_ = log.Sync()
		os.Exit(1)
	}
}
