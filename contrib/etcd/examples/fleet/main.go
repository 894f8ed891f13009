// Command fleet runs a small twinmq fleet on one machine: an etcd, two
// embedded RocketMQ clusters, and one consumer process per lane (base,
// "gray" and "gray.canary") that find each other through the etcd lane
// registry and follow the configuration published in etcd. A producer
// sends orders on several lanes; each consumer process prints what it
// handled. Then the gray.canary process is killed (SIGKILL): its traffic
// falls back to gray. Last, a new configuration is published, and every
// process applies it without a restart.
//
//	cd contrib/etcd && go run ./examples/fleet
//
// The same program is the consumer: started with TWINMQ_EXAMPLE_LANE set,
// it runs one consumer in that lane (the code in consume below is what a
// service of the fleet runs).
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/consumer"
	etcd "github.com/twinmq/twinmq/contrib/etcd"
	"github.com/twinmq/twinmq/contrib/etcd/internal/etcdtest"
	"github.com/twinmq/twinmq/embedded"
	"github.com/twinmq/twinmq/lane"
	"github.com/twinmq/twinmq/producer"
)

const (
	topic     = "orders"
	group     = "billing"
	configKey = "/twinmq/config/billing"
	// The group's forwarding credential; a real service reads it from its
	// secret store.
	token = "billing-forward-token"
)

func main() {
	var err error
	if l, ok := os.LookupEnv("TWINMQ_EXAMPLE_LANE"); ok {
		err = consume(l, os.Getenv("TWINMQ_EXAMPLE_ETCD"))
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// consume is one process of the fleet: a consumer of the group in lane l,
// configured from etcd and registered in the etcd lane registry.
func consume(l, endpoint string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	start, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reg, err := etcd.NewRegistry(start, cli, etcd.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	src, err := etcd.NewSource(start, cli, configKey, etcd.Options{})
	if err != nil {
		return err
	}
	defer src.Close()
	w, err := config.Start(start, src, config.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	_, unsubscribe := w.Subscribe(func(_, cur *config.Config) {
		fmt.Printf("applied configuration revision %s (lane routing on: %t)\n", w.Revision(), cur.Lanes.Enabled)
	})
	defer unsubscribe()

	c, err := consumer.New(start, group, topic, func(ctx context.Context, m *consumer.Message) error {
		how := "received"
		if m.Forwarded {
			how = "forwarded"
		}
		fmt.Printf("handled %-22s lane %-12s %s\n", m.Body, name(m.Lane), how)
		return nil
	}, consumer.WithWatcher(w), consumer.WithLaneRegistry(reg), consumer.WithLane(l),
		consumer.WithForwardToken(token), consumer.WithInstanceName("example-"+name(l)),
		consumer.WithLongPolling(500*time.Millisecond), consumer.WithInvisibleDuration(3*time.Second))
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	closing, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	return c.Close(closing)
}

func name(l string) string {
	if l == lane.Base {
		return "base"
	}
	return l
}

// run is the operator's side: the stores, the consumer processes, the
// producer.
func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "twinmq-fleet-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := etcdtest.StartDir(filepath.Join(dir, "etcd"))
	if err != nil {
		return err
	}
	defer store.Stop()
	env, err := embedded.Start(ctx, embedded.Options{
		Topics: []embedded.Topic{{Name: topic, Queues: 4}}, MinLongPolling: 100 * time.Millisecond,
		MinInvisibleDuration: time.Second,
	})
	if err != nil {
		return err
	}
	defer func() { _ = env.Close(context.Background()) }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{store.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	doc := config.Default()
	doc.Topics = map[string]config.Topic{topic: env.TopicConfig(topic)}
	doc.Consumers = map[string]config.Consumer{group: {Concurrency: 4, MaxAttempts: 16, Mode: config.ModeDirect}}
	doc.Lanes.LeaseTTL = config.Duration(time.Second)
	if err := publish(ctx, cli, doc); err != nil {
		return err
	}
	fmt.Printf("etcd on %s; configuration published at %s\n\n", store.Endpoint(), configKey)

	procs := map[string]*exec.Cmd{}
	var wg sync.WaitGroup
	seen := &handled{bodies: map[string]bool{}}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		wg.Wait()
	}()
	for _, l := range []string{lane.Base, "gray", "gray.canary"} {
		p, err := spawn(l, store.Endpoint(), &wg, seen)
		if err != nil {
			return err
		}
		procs[l] = p
	}
	reg, err := etcd.NewRegistry(ctx, cli, etcd.Options{})
	if err != nil {
		return err
	}
	defer reg.Close()
	if err := waitFor(ctx, reg, func(s lane.Snapshot) bool { return len(s.Instances) == 3 }); err != nil {
		return err
	}

	src, err := etcd.NewSource(ctx, cli, configKey, etcd.Options{})
	if err != nil {
		return err
	}
	defer src.Close()
	p, err := producer.New(ctx, producer.WithSource(src))
	if err != nil {
		return err
	}
	defer func() { _ = p.Close(context.Background()) }()
	// send sends one order per lane and waits until the fleet handled all.
	send := func(round string) error {
		var bodies []string
		for _, l := range []string{lane.Base, "gray", "gray.canary", "gray.beta", "blue"} {
			body := fmt.Sprintf("order-%s-%s", round, name(l))
			if _, err := p.Send(lane.WithLane(ctx, l), &producer.Message{Topic: topic, Body: []byte(body)}); err != nil {
				return err
			}
			bodies = append(bodies, body)
		}
		return seen.wait(ctx, bodies)
	}

	fmt.Println("== every lane has a consumer process")
	if err := send("1"); err != nil {
		return err
	}

	fmt.Println("\n== SIGKILL the gray.canary process: its lane falls back to gray")
	fmt.Println("   (what the killed process had taken from the brokers comes back after its invisible time, 3 s)")
	_ = procs["gray.canary"].Process.Signal(syscall.SIGKILL)
	delete(procs, "gray.canary")
	if err := send("2"); err != nil {
		return err
	}

	fmt.Println("\n== publish a new configuration (lane routing off): every process applies it live")
	doc.Lanes.Enabled = false
	if err := publish(ctx, cli, doc); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	return send("3")
}

// handled is what the consumer processes reported handling.
type handled struct {
	mu     sync.Mutex
	bodies map[string]bool
}

func (h *handled) add(line string) {
	if f := strings.Fields(line); len(f) > 1 && f[0] == "handled" {
		h.mu.Lock()
		h.bodies[f[1]] = true
		h.mu.Unlock()
	}
}

func (h *handled) wait(ctx context.Context, bodies []string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		h.mu.Lock()
		missing := 0
		for _, b := range bodies {
			if !h.bodies[b] {
				missing++
			}
		}
		h.mu.Unlock()
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d orders not handled in time", missing, len(bodies))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publish writes the document with a compare-and-swap on the key's
// revision, as twinmqctl put does.
func publish(ctx context.Context, cli *clientv3.Client, doc *config.Config) error {
	if err := doc.Validate(); err != nil {
		return err
	}
	data, err := doc.Marshal()
	if err != nil {
		return err
	}
	cur, err := cli.Get(ctx, configKey)
	if err != nil {
		return err
	}
	var rev int64
	if len(cur.Kvs) > 0 {
		rev = cur.Kvs[0].ModRevision
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(configKey), "=", rev)).
		Then(clientv3.OpPut(configKey, string(data))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s changed while publishing", configKey)
	}
	return nil
}

// spawn starts this program as the consumer of lane l and prefixes its
// output with the lane.
func spawn(l, endpoint string, wg *sync.WaitGroup, seen *handled) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self) //nolint:gosec // G204: runs this very program again (os.Executable) as a lane consumer
	cmd.Env = append(os.Environ(), "TWINMQ_EXAMPLE_LANE="+l, "TWINMQ_EXAMPLE_ETCD="+endpoint)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(out)
		once := sync.OnceFunc(func() { close(ready) })
		for sc.Scan() {
			if sc.Text() == "ready" {
				once()
				continue
			}
			seen.add(sc.Text())
			fmt.Printf("  [%-11s pid %d] %s\n", name(l), cmd.Process.Pid, strings.TrimSpace(sc.Text()))
		}
		once()
		_ = cmd.Wait()
	}()
	<-ready
	return cmd, nil
}

func waitFor(ctx context.Context, reg *etcd.Registry, ok func(lane.Snapshot) bool) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ch, err := reg.Watch(wctx, group)
	if err != nil {
		return err
	}
	for s := range ch {
		if ok(s) {
			return nil
		}
	}
	return fmt.Errorf("the consumer processes did not all register: %w", wctx.Err())
}
