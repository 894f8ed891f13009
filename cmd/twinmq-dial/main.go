// Command twinmq-dial is the dial test: it probes every broker of every
// cluster of the logic topics in a twinmq configuration document, follows
// the document's changes live, and reports loss, duplicates, latency and
// send errors per broker (package internal/dial says how).
//
// Usage:
//
//	twinmq-dial -config twinmq.json [-listen 127.0.0.1:9465] [-rate 1]
//	  [-body 128] [-period 10s] [-delay 1s] [-kinds normal,delay,transaction]
//	  [-topics a,b] [-group twinmq-dial] [-max-p99 0] [-shadow]
//	  [-log-level info]
//
// The document is the one the services read (config.File watches it). The
// probed topics must accept every kind asked for (a MIXED topic, or fewer
// -kinds), and the group must exist on clusters that do not create groups
// on first use. On -listen it serves Prometheus metrics on /metrics (the dial's
// twinmq_dial_*, the document's reloads, Go runtime and process metrics) and
// a status page on /, one row per broker. It stops on SIGINT or SIGTERM.
//
// With -shadow it is a stress test: raise -rate, and every probe goes to
// the shadow topic of each cluster with the shadow marker, consumed in the
// shadow group of -group, never to a production topic. It refuses to start
// (exit status 2) when the document's shadow kill switch is off or a probed
// topic has no shadow topics, and stops probing while a reload keeps the
// switch off. The rate, body size and periods are flags, not fields of the
// document: the services' SDKs read that document strictly, and these
// settings are this process's alone (package internal/dial says more).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/dial"
)

// errUsage marks a bad command line (exit status 2).
var errUsage = errors.New("usage")

type flags struct {
	config, listen, logLevel string
	opts                     dial.Options
}

func parseFlags(args []string, out io.Writer) (*flags, error) {
	fs := flag.NewFlagSet("twinmq-dial", flag.ContinueOnError)
	fs.SetOutput(out)
	f := &flags{}
	var kinds, topics string
	fs.StringVar(&f.config, "config", "", "path of the twinmq configuration document (JSON); required")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9465", "address of /metrics and the status page")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Float64Var(&f.opts.Rate, "rate", 1, "probes per second to each broker, kinds taking turns")
	fs.IntVar(&f.opts.BodySize, "body", 128, "probe body size in bytes")
	fs.DurationVar(&f.opts.Period, "period", 10*time.Second, "reconciliation period: a probe not back this long after it was due is lost")
	fs.DurationVar(&f.opts.Delay, "delay", time.Second, "delay of the delayed probes")
	fs.StringVar(&kinds, "kinds", "normal,delay,transaction", "probe kinds, comma-separated")
	fs.StringVar(&topics, "topics", "", "logic topics to probe, comma-separated (default: all of the document)")
	fs.StringVar(&f.opts.Group, "group", dial.DefaultGroup, "the dial's consumer group")
	fs.DurationVar(&f.opts.MaxP99, "max-p99", 0, "a broker whose p99 latency is above this reports (0: latency never reports)")
	fs.BoolVar(&f.opts.Shadow, "shadow", false, "stress mode: probes go to the shadow topics with the shadow marker, consumed in the shadow group of -group")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if f.config == "" {
		return nil, fmt.Errorf("%w: -config is required", errUsage)
	}
	for _, k := range strings.Split(kinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			f.opts.Kinds = append(f.opts.Kinds, dial.Kind(k))
		}
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			f.opts.Topics = append(f.opts.Topics, t)
		}
	}
	return f, nil
}

// run serves until ctx ends. ready, if not nil, gets the listen address
// once the dial runs.
func run(ctx context.Context, f *flags, log *zap.Logger, ready func(addr string)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w, err := config.Start(ctx, config.File(f.config, config.FileOptions{Logger: log}), config.Options{Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	opts := f.opts
	opts.Logger, opts.Registerer = log, reg
	d, err := dial.New(ctx, w, opts)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(cctx)
	}()
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/{$}", d.StatusHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("dial test running", zap.String("listen", lis.Addr().String()))
	if ready != nil {
		ready(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// Serve returns http.ErrServerClosed once Shutdown began: the normal end.
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func newLogger(level string) (*zap.Logger, error) {
	lvl := zapcore.InfoLevel
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: -log-level %q: %w", errUsage, level, err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

func main() {
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if err == nil {
		var log *zap.Logger
		if log, err = newLogger(f.logLevel); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			err = run(ctx, f, log, nil)
			stop()
			_ = log.Sync()
		}
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "twinmq-dial:", err)
		if errors.Is(err, errUsage) || errors.Is(err, config.ErrInvalidConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
