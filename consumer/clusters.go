package consumer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/internal/clientstate"
	"github.com/twinmq/twinmq/internal/driver"
)

// clusterRunner consumes the physical topic on one cluster: one RocketMQ
// client (its own client id and subscription) and a few receive loops per
// broker found in the cluster's route. A configuration that changes the
// cluster replaces its runner: the new one starts receiving while the old
// one stops receiving, settles what it received, and closes its client.
type clusterRunner struct {
	c            *Consumer
	key          string
	name         string
	physical     string
	accessPoints []string
	client       brokerClient

	// ctx ends this runner's receiving (Close, or a configuration that
	// dropped the cluster); loops and work count its goroutines; stopAck
	// ends its ack senders once its work is settled.
	ctx     context.Context
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	work    sync.WaitGroup
	stopAck chan struct{}

	mu      sync.Mutex
	brokers map[string]*brokerLoop // by broker name and endpoint

	link clientstate.Link // of the route queries (State)
}

// clusterKey identifies what a runner was built from; a change of any of
// it needs a new client.
func clusterKey(cfg *config.Config, logic string, cc config.Cluster) string {
	physical := cc.Topic
	if physical == "" {
		physical = logic
	}
	cred := cfg.Credentials[cc.Credentials]
	return strings.Join([]string{cc.Name, physical, strings.Join(cc.Endpoints, ","), fmt.Sprint(cc.TLS),
		cc.Credentials, cred.AccessKey, cred.AccessSecret}, "\x00")
}

// newClusterRunner creates the runner and its client; it receives nothing
// until start. Clusters are consumed whatever their weight: a drained
// cluster (weight 0) still holds messages that must be consumed.
func (c *Consumer) newClusterRunner(cfg *config.Config, cc config.Cluster, seq int) (*clusterRunner, error) {
	physical := cc.Topic
	if physical == "" {
		physical = c.topic
	}
	dc := driver.Config{
		Type:           driver.SimpleConsumer,
		Cluster:        cc.Name,
		Group:          c.group,
		Subscriptions:  []driver.Subscription{{Topic: physical, Filter: driver.Filter{Type: driver.FilterTag, Expression: c.opts.filter}}},
		RequestTimeout: cfg.Timeouts.Request.D(),
		DialOptions:    c.opts.DialOptions,
		ClientID:       fmt.Sprintf("%s@consumer-%s-%d", c.opts.Instance, cc.Name, seq),
		Logger:         c.opts.Logger,
		Registerer:     c.opts.Registerer,
		OnVerifyMessage: func(ctx context.Context, _ string, m *driver.ReceivedMessage) error {
			return c.verify(ctx, cc.Name, m)
		},
	}
	if c.opts.polling > 0 {
		dc.LongPollingTimeout = c.opts.polling
	}
	if cc.TLS {
		dc.TLS = c.opts.TLS
	}
	if cc.Credentials != "" {
		cred := cfg.Credentials[cc.Credentials]
		dc.Credentials = &driver.Credentials{AccessKey: cred.AccessKey, SecretKey: cred.AccessSecret}
	}
	var (
		client brokerClient
		err    error
	)
	if c.opts.newClient != nil {
		client, err = c.opts.newClient(dc)
	} else {
		client, err = driver.New(dc)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cluster %q: %w", ErrInvalidConfig, cc.Name, err)
	}
	cr := &clusterRunner{
		c: c, key: clusterKey(cfg, c.topic, cc), name: cc.Name, physical: physical,
		accessPoints: slices.Clone(cc.Endpoints), client: client,
		stopAck: make(chan struct{}), brokers: map[string]*brokerLoop{},
	}
	cr.ctx, cr.cancel = context.WithCancel(c.recvCtx)
	return cr, nil
}

// buildClusters creates a runner per cluster of the topic (at New).
func (c *Consumer) buildClusters(cfg *config.Config) error {
	for _, cc := range cfg.Topics[c.topic].Clusters {
		c.clusterSeq++
		cr, err := c.newClusterRunner(cfg, cc, c.clusterSeq)
		if err != nil {
			return err
		}
		c.clusters = append(c.clusters, cr)
	}
	return nil
}

// goLoop runs f as one of the runner's receive-side goroutines.
func (cr *clusterRunner) goLoop(f func()) {
	cr.loops.Add(1)
	cr.c.loops.Add(1)
	go func() {
		defer cr.c.loops.Done()
		defer cr.loops.Done()
		f()
	}()
}

// goWork runs f as work on a received message of this runner.
func (cr *clusterRunner) goWork(f func()) {
	cr.work.Add(1)
	cr.c.work.Add(1)
	go func() {
		defer cr.c.work.Done()
		defer cr.work.Done()
		f()
	}()
}

// start begins receiving: the route is read at once (bounded by ctx) and
// then every discoverInterval.
func (cr *clusterRunner) start(ctx context.Context) {
	cr.discover(ctx)
	cr.goLoop(cr.run)
}

// run looks for new brokers until the runner stops.
func (cr *clusterRunner) run() {
	t := time.NewTicker(discoverInterval)
	defer t.Stop()
	for {
		select {
		case <-cr.ctx.Done():
			return
		case <-t.C:
			cr.discover(cr.ctx)
		}
	}
}

// retire stops a runner the configuration dropped: no new receives, every
// message it received is handled and settled, then its client goes.
func (c *Consumer) retire(cr *clusterRunner) {
	defer c.retiring.Done()
	cr.cancel()
	cr.loops.Wait()
	cr.work.Wait()
	close(cr.stopAck)
	ctx, cancel := context.WithTimeout(context.Background(), c.live.Load().requestTimeout)
	defer cancel()
	if err := cr.client.Close(ctx); err != nil {
		c.log.Debug("closing the client of a dropped cluster", zap.String("cluster", cr.name), zap.Error(err))
	}
	c.log.Info("stopped consuming a cluster the configuration dropped", zap.String("cluster", cr.name))
}

// reconcileLocked applies a new cluster list: runners whose cluster did not
// change keep running, new clusters start, dropped ones retire in the
// background. If a new client cannot be made, nothing changes.
func (c *Consumer) reconcileLocked(cfg *config.Config) error {
	have := make(map[string]*clusterRunner, len(c.clusters))
	for _, cr := range c.clusters {
		have[cr.key] = cr
	}
	var next, started []*clusterRunner
	for _, cc := range cfg.Topics[c.topic].Clusters {
		if cr := have[clusterKey(cfg, c.topic, cc)]; cr != nil {
			next = append(next, cr)
			delete(have, cr.key)
			continue
		}
		c.clusterSeq++
		cr, err := c.newClusterRunner(cfg, cc, c.clusterSeq)
		if err != nil {
			for _, s := range started {
				s.cancel()
				_ = s.client.Close(context.Background())
			}
			return err
		}
		next = append(next, cr)
		started = append(started, cr)
	}
	c.clusters = next
	for _, cr := range started {
		c.log.Info("consuming a cluster the configuration added", zap.String("cluster", cr.name))
		cr.goLoop(func() {
			cr.discover(cr.ctx)
			cr.run()
		})
	}
	for _, cr := range have {
		c.retiring.Add(1)
		go c.retire(cr)
	}
	return nil
}
