package fleet

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	etcd "github.com/twinmq/twinmq/contrib/etcd"
	"github.com/twinmq/twinmq/lane"
)

// MemberEnv, set to "1" in a process's environment, makes IsMember true:
// a test binary checks it in TestMain and runs Member instead of its tests.
const MemberEnv = "TWINMQ_FLEET_MEMBER"

// The settings of a member, from its environment.
const (
	envEtcd  = "TWINMQ_FLEET_ETCD"
	envKey   = "TWINMQ_FLEET_KEY"
	envLane  = "TWINMQ_FLEET_LANE"
	envName  = "TWINMQ_FLEET_NAME"
	envGroup = "TWINMQ_FLEET_GROUP"
	envTopic = "TWINMQ_FLEET_TOPIC"
	envToken = "TWINMQ_FLEET_TOKEN" //nolint:gosec // G101: the name of an environment variable, not a credential
)

// IsMember reports whether this process was started as a fleet member.
func IsMember() bool { return os.Getenv(MemberEnv) == "1" }

// Member runs one consumer process of the fleet until SIGTERM, and
// returns its exit code. It follows the configuration in etcd, registers
// in the etcd lane registry in its lane, and reports on stdout, one line
// each:
//
//	READY <lane>
//	CONFIG <revision> <unix nanos>
//	HANDLED <message id> <message lane> <forwarded> <unix nanos>
func Member() int {
	if err := member(); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		return 1
	}
	return 0
}

// out writes whole lines to stdout from many goroutines.
type out struct{ mu sync.Mutex }

func (o *out) line(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func member() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var o out
	log := zap.NewNop()
	if os.Getenv("TWINMQ_FLEET_DEBUG") != "" {
		log, _ = zap.NewDevelopment()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{os.Getenv(envEtcd)}, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reg, err := etcd.NewRegistry(sctx, cli, etcd.Options{Logger: log})
	if err != nil {
		return err
	}
	defer reg.Close()
	src, err := etcd.NewSource(sctx, cli, os.Getenv(envKey), etcd.Options{Logger: log})
	if err != nil {
		return err
	}
	defer src.Close()
	w, err := config.Start(sctx, src, config.Options{Logger: log})
	if err != nil {
		return err
	}
	defer w.Close()
	_, unsubscribe := w.Subscribe(func(_, _ *config.Config) {
		o.line("CONFIG %s %d", w.Revision(), time.Now().UnixNano())
	})
	defer unsubscribe()
	o.line("CONFIG %s %d", w.Revision(), time.Now().UnixNano())

	myLane := os.Getenv(envLane)
	handle := func(ctx context.Context, m *consumer.Message) error {
		msgLane, _ := lane.FromContext(ctx)
		o.line("HANDLED %s %s %t %d", m.ID, orBase(msgLane), m.Forwarded, time.Now().UnixNano())
		return nil
	}
	c, err := consumer.New(sctx, os.Getenv(envGroup), os.Getenv(envTopic), handle,
		consumer.WithWatcher(w), consumer.WithLaneRegistry(reg), consumer.WithLane(myLane),
		consumer.WithForwardToken(os.Getenv(envToken)), consumer.WithInstanceName(os.Getenv(envName)),
		consumer.WithLongPolling(500*time.Millisecond), consumer.WithInvisibleDuration(3*time.Second),
		consumer.WithLogger(log))
	if err != nil {
		return err
	}
	o.line("READY %s", orBase(myLane))
	<-ctx.Done()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	return c.Close(cctx)
}

// orBase names the base lane in a line, where "" would be lost.
func orBase(l string) string {
	if l == lane.Base {
		return "-"
	}
	return l
}
