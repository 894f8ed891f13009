//go:build interop

package interop

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/producer"
)

// sdkBenchTopic is the topic of the produce benchmark, created by
// interop/run.sh.
const sdkBenchTopic = "interop_bench"

// Phases of each produce benchmark: senders run through a warm-up (routes,
// connections) and then a fixed measured window. A fixed window rather
// than b.N keeps the whole set at about 40 s. Before the first one, both
// send paths of the peer (single and batch) are exercised for peerWarmup
// each, so that the JVM's JIT weighs less on whichever sub-benchmark
// happens to run first. It does not settle within that time: on a cold
// peer the C2 compiler threads take a large share of the peer's CPU for
// the whole run, which peer-cpu-us/msg includes.
const (
	produceWarmup = time.Second
	produceWindow = 5 * time.Second
	peerWarmup    = 5 * time.Second
)

// BenchmarkInteropProduce measures synchronous Send of 1 KB messages from
// C concurrent senders through the SDK producer to the real RocketMQ
// proxy, with batching on and off. Each sub-benchmark runs for a fixed
// window whatever b.N is; run it with -benchtime 1x. It reports msgs/s as
// a figure, and as plain metrics the p50 and p99 latency of a Send, the
// CPU per message of this process (the client) and of the peer's JVMs
// (name server and brokers with their proxies), and how busy the whole
// machine was (the client and the peer share its cores).
func BenchmarkInteropProduce(b *testing.B) {
	endpoint := os.Getenv("TWINMQ_INTEROP_ENDPOINT")
	if endpoint == "" {
		b.Fatal("TWINMQ_INTEROP_ENDPOINT is not set: run the benchmark with `make interop`")
	}
	for _, batching := range []bool{true, false} {
		cfg := sdkConfig(endpoint, sdkBenchTopic, batching, sdkCluster{name: "rmq", physical: sdkBenchTopic, weight: 100})
		p := sdkProducer(b, producer.WithConfig(cfg))
		runProduce(b, p, sdkBenchTopic, 32, 0, peerWarmup)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.Close(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"batched", "unbatched"} {
		for _, c := range []int{16, 64} {
			b.Run(fmt.Sprintf("%s/c%d", mode, c), func(b *testing.B) {
				cfg := sdkConfig(endpoint, sdkBenchTopic, mode == "batched", sdkCluster{name: "rmq", physical: sdkBenchTopic, weight: 100})
				reg := prometheus.NewRegistry()
				p := sdkProducer(b, producer.WithConfig(cfg), producer.WithRegisterer(reg))
				r := runProduce(b, p, sdkBenchTopic, c, produceWarmup, produceWindow)
				// Messages per SendMessage request, warm-up included.
				if n, sum, _ := sdkHistogram(b, reg, "twinmq_batch_size_items", 1); n > 0 {
					b.ReportMetric(sum/float64(n), "msgs/request")
				}
				b.ReportMetric(r.rate, fmt.Sprintf("fig:interop_produce_%s_c%d_msgs_s", mode, c))
				b.ReportMetric(r.p50.Seconds()*1e3, "p50-ms")
				b.ReportMetric(r.p99.Seconds()*1e3, "p99-ms")
				b.ReportMetric(r.clientCPU, "client-cpu-us/msg")
				b.ReportMetric(r.peerCPU, "peer-cpu-us/msg")
				b.ReportMetric(r.busy, "host-busy-%")
			})
		}
	}
}

// produceResult is what one run measured in its window.
type produceResult struct {
	rate      float64 // sends completed per second
	p50, p99  time.Duration
	clientCPU float64 // µs of this process's CPU per message
	clientRQ  float64 // µs per message this process's threads waited for a CPU
	peerCPU   float64 // µs of the peer JVMs' CPU per message
	busy      float64 // % of all cores busy, whoever used them
}

// runProduce runs c senders of 1 KB messages to topic through warmup and
// window and measures the sends that completed inside the window.
func runProduce(b *testing.B, p *producer.Producer, topic string, c int, warmup, window time.Duration) produceResult {
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	ctx := context.Background()
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+window)
	lats := make([][]time.Duration, c)
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1<<14)
			for {
				t0 := time.Now()
				if !t0.Before(to) {
					break
				}
				_, err := p.Send(ctx, &producer.Message{Topic: topic, Body: body})
				t1 := time.Now()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if !t1.Before(from) && !t1.After(to) {
					lat = append(lat, t1.Sub(t0))
				}
			}
			lats[g] = lat
		}()
	}
	time.Sleep(time.Until(from))
	s0 := sampleCPU()
	time.Sleep(time.Until(to))
	s1 := sampleCPU()
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d sends failed; first: %v", n, firstErr.Load())
	}
	all := slices.Concat(lats...)
	if len(all) == 0 {
		b.Fatal("no send completed in the window")
	}
	slices.Sort(all)
	n := float64(len(all))
	pct := func(q float64) time.Duration { return all[min(len(all)-1, int(q*n))] }
	return produceResult{
		rate:      n / to.Sub(from).Seconds(),
		p50:       pct(0.50),
		p99:       pct(0.99),
		clientCPU: float64((s1.self - s0.self).Microseconds()) / n,
		clientRQ:  float64((s1.selfWait - s0.selfWait).Microseconds()) / n,
		peerCPU:   float64((s1.peer - s0.peer).Microseconds()) / n,
		busy:      100 * float64(s1.busy-s0.busy) / float64(max(s1.total-s0.total, 1)),
	}
}

// cpuSample is a reading of the CPU counters the benchmark reports.
type cpuSample struct {
	self, peer  time.Duration // this process; the peer's JVMs
	selfWait    time.Duration // this process's threads runnable but not running
	busy, total uint64        // machine-wide jiffies, all cores
}

// clockTick is the unit of /proc CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

func sampleCPU() cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.selfWait = runqWait("/proc/self")
	s.peer = peerCPU(0)
	s.busy, s.total = machineCPU()
	return s
}

// peerCPU sums the CPU time of the Java processes in this process's network
// namespace but the one of pid skip (a client JVM the benchmark started
// itself; 0 skips none): interop/run.sh starts the peer (name server,
// brokers and proxies) in the private namespace the benchmark runs in, so
// these are exactly the peer's processes.
func peerCPU(skip int) time.Duration {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total time.Duration
	for _, dir := range dirs {
		if ns, err := os.Readlink(dir + "/ns/net"); err != nil || ns != self {
			continue
		}
		if skip != 0 && dir == "/proc/"+strconv.Itoa(skip) {
			continue
		}
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "java" {
			continue
		}
		total += procCPU(dir)
	}
	return total
}

// procCPU is the user plus system CPU time of the process whose /proc
// directory is dir, 0 when it cannot be read.
func procCPU(dir string) time.Duration {
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the parenthesized command: state is field 3, utime and
	// stime are fields 14 and 15.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	k, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+k) * clockTick
}

// runqWait sums, over the threads of the process whose /proc directory is
// dir, the time they were runnable but waiting for a CPU (the second field
// of each thread's schedstat). On a machine with more runnable threads than
// cores it shows how much of its share a process did not get. Threads that
// ended are not counted.
func runqWait(dir string) time.Duration {
	tasks, _ := filepath.Glob(dir + "/task/[0-9]*")
	var total time.Duration
	for _, task := range tasks {
		data, err := os.ReadFile(task + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(data)); len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// machineCPU returns the busy and total jiffies of all cores from
// /proc/stat (busy excludes idle and iowait).
func machineCPU() (busy, total uint64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0
	}
	// user nice system idle iowait irq softirq steal; guest time is
	// already counted in user.
	for i, v := range fields[1:9] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total
}
