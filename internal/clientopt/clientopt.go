// Package clientopt holds the options the producer and the consumer share:
// where the configuration comes from (a fixed document, a source, or a
// running watcher), the logger, the Prometheus registerer, the TLS
// configuration and gRPC dial options of the broker connections, and the
// instance name. Each package's With* functions are thin wrappers over the
// setters here, so that the two agree on every default and check.
package clientopt

import (
	"crypto/tls"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/twinmq/twinmq/config"
)

// Common is the shared part of the producer's and the consumer's options.
type Common struct {
	Config      *config.Config
	Source      config.Source
	Watcher     *config.Watcher
	Logger      *zap.Logger
	Registerer  prometheus.Registerer
	TLS         *tls.Config
	DialOptions []grpc.DialOption
	Instance    string
}

// Setter changes Common; the packages wrap it in their own Option type.
type Setter func(*Common)

// Config serves one fixed document.
func Config(cfg *config.Config) Setter { return func(c *Common) { c.Config = cfg } }

// Source watches src.
func Source(src config.Source) Setter { return func(c *Common) { c.Source = src } }

// Watcher shares a running watcher.
func Watcher(w *config.Watcher) Setter { return func(c *Common) { c.Watcher = w } }

// Logger sets the logger.
func Logger(l *zap.Logger) Setter { return func(c *Common) { c.Logger = l } }

// Registerer sets where metrics are registered.
func Registerer(reg prometheus.Registerer) Setter { return func(c *Common) { c.Registerer = reg } }

// TLS sets the TLS configuration of clusters that use TLS.
func TLS(cfg *tls.Config) Setter { return func(c *Common) { c.TLS = cfg } }

// DialOptions adds gRPC dial options (each call adds to the earlier ones).
func DialOptions(opts ...grpc.DialOption) Setter {
	return func(c *Common) { c.DialOptions = append(c.DialOptions, opts...) }
}

// Instance names the instance.
func Instance(name string) Setter { return func(c *Common) { c.Instance = name } }

// Normalize checks that exactly one configuration option was given and
// fills the defaults: a logger that discards everything, TLS 1.2 or later
// verified against the system roots, and an instance name made of host,
// process id and start time (unique per instance). A failure wraps
// errInvalid, the caller's sentinel.
func (c *Common) Normalize(errInvalid error) error {
	given := 0
	for _, set := range []bool{c.Config != nil, c.Source != nil, c.Watcher != nil} {
		if set {
			given++
		}
	}
	if given != 1 {
		return fmt.Errorf("%w: give exactly one of WithConfig, WithSource and WithWatcher (got %d)", errInvalid, given)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.TLS == nil {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.Instance == "" {
		host, _ := os.Hostname()
		c.Instance = fmt.Sprintf("%s@%d@%d", host, os.Getpid(), time.Now().UnixNano())
	}
	return nil
}
