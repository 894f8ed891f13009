//go:build interop

package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twinmq/twinmq/config"
	"github.com/twinmq/twinmq/producer"
)

// raceTopic is the topic of the send race, created by interop/run.sh on
// the 5.4.0 peer. Both clients send to it, through its name server.
const raceTopic = "interop_race"

// The race's timing. Before the first round every side runs once for
// raceFirstWarmup (untimed, at 32 senders), so that neither the peer's JIT
// (its single and batch send paths) nor a client's own start-up (routes,
// connections, the JVM's compiler) lands in a measured window. Then each round runs every side for raceWarmup and
// measures raceWindow; each figure is the median of its raceRounds rounds
// (internal/benchfig takes it). Four short rounds rather than two long
// ones: on a shared machine the load changes within seconds, and more
// alternations spread it more evenly over the sides. About 2.5 minutes in
// all.
const (
	raceFirstWarmup = 4 * time.Second
	raceWarmup      = time.Second
	raceWindow      = 3 * time.Second
	raceRounds      = 4
	raceBodySize    = 1024
)

// raceJVM holds the Java client's heap small: the peer's JVMs and the
// benchmark share the machine. -Duser.home moves the client's logs into the
// benchmark's temp dir.
var raceJVM = []string{"-Xms128m", "-Xmx256m", "-XX:+UseG1GC"}

// BenchmarkInteropRemotingRace races twinmq against RocketMQ's own Java
// client (interop/java, rocketmq-client 5.4.0), both over the remoting
// protocol straight to the 5.4.0 broker found through its name server: 1 KB
// bodies, synchronous sends from 16 and 64 senders, in alternating rounds
// within one peer lifetime. Four sides:
//
//	java-unbatched     DefaultMQProducer
//	java-autobatch     the same with AutoBatch (10 ms, 32 KiB, 32 MiB)
//	remoting-unbatched the SDK producer, batching off
//	remoting-batched   the SDK producer, batching on with its defaults
//	                   (10 ms, 256 KiB, 32 MiB)
//
// The Java client runs in one JVM for the whole race (a child process,
// driven through its standard input), each side keeps its producer for the
// whole race, and the order of the two sides of a pair swaps every other
// round, so that neither client always follows the other's garbage.
//
// Each round reports fig:interop_<side>_c<N>_msgs_s and
// fig:interop_<side>_c<N>_p99_ms (side java_unbatched, java_autobatch,
// remoting_unbatched, remoting_batched), and as plain metrics the p50, the
// client's and the peer's CPU per message, the time per message the
// client's threads waited for a CPU (client-runq-us/msg: on a shared
// machine, how much of its share of the cores a client did not get) and
// how busy the machine was. At
// the end it prints the medians as the ratios. Run it with
// -benchtime 1x: each run lasts a fixed time whatever b.N is. With
// TWINMQ_INTEROP_RACE_THREADS=1 it also prints, for each run, the JVM threads
// (the peer's and the Java client's) that used the most CPU in the window,
// in µs per message: where the CPU goes on the Java side.
func BenchmarkInteropRemotingRace(b *testing.B) {
	namesrv := os.Getenv("TWINMQ_INTEROP_NAMESRV")
	if namesrv == "" {
		b.Fatal("TWINMQ_INTEROP_NAMESRV is not set: run the benchmark with `make interop`")
	}
	r := &race{namesrv: namesrv, dir: b.TempDir(), rates: map[string]map[int]float64{},
		producers: map[bool]*raceProducer{}, newErr: map[bool]error{},
		threads: os.Getenv("TWINMQ_INTEROP_RACE_THREADS") == "1"}
	b.Cleanup(func() {
		if err := r.close(); err != nil {
			b.Error(err)
		}
	})
	sides := []*raceSide{
		{label: "java-unbatched", fig: "java_unbatched", run: r.javaRun("unbatched")},
		{label: "remoting-unbatched", fig: "remoting_unbatched", run: r.twinmqRun(false)},
		{label: "java-autobatch", fig: "java_autobatch", run: r.javaRun("autobatch")},
		{label: "remoting-batched", fig: "remoting_batched", run: r.twinmqRun(true)},
	}
	// Warm every side before any round (a sub-benchmark of its own, which
	// reports no figure).
	for _, s := range sides {
		b.Run(s.label+"/warmup", func(b *testing.B) {
			s.run(b, 32, 0, raceFirstWarmup)
		})
	}
	for round := 1; round <= raceRounds; round++ {
		order := slices.Clone(sides)
		if round%2 == 0 {
			order[0], order[1], order[2], order[3] = order[1], order[0], order[3], order[2]
		}
		for _, c := range []int{16, 64} {
			for _, s := range order {
				b.Run(fmt.Sprintf("%s/c%d/round%d", s.label, c, round), func(b *testing.B) {
					res := s.run(b, c, raceWarmup, raceWindow)
					b.ReportMetric(res.rate, fmt.Sprintf("fig:interop_%s_c%d_msgs_s", s.fig, c))
					b.ReportMetric(res.p99.Seconds()*1e3, fmt.Sprintf("fig:interop_%s_c%d_p99_ms", s.fig, c))
					b.ReportMetric(res.p50.Seconds()*1e3, "p50-ms")
					b.ReportMetric(res.clientCPU, "client-cpu-us/msg")
					b.ReportMetric(res.clientRQ, "client-runq-us/msg")
					b.ReportMetric(res.peerCPU, "peer-cpu-us/msg")
					b.ReportMetric(res.busy, "host-busy-%")
					r.record(fmt.Sprintf("%s_c%d", s.fig, c), round, res.rate)
				})
			}
		}
	}
	r.logRatios()
}

// raceSide is one of the four contenders. run runs it with c senders for
// warmup and window and measures the window; it fails b on any failed send.
type raceSide struct {
	label, fig string
	run        func(b *testing.B, c int, warmup, window time.Duration) produceResult
}

// race holds what the sides share across rounds: the Java child process
// and the SDK producers, each started on first use.
type race struct {
	namesrv string
	dir     string
	rates   map[string]map[int]float64 // msgs/s by side_cN and round
	threads bool                       // log the JVM threads' CPU of each window

	java      *raceJava
	javaErr   error                  // why the Java client could not start
	producers map[bool]*raceProducer // by batching
	newErr    map[bool]error         // why a producer could not start
}

type raceProducer struct {
	p   *producer.Producer
	reg *prometheus.Registry
}

// twinmqRun is the run of the SDK producer with batching on or off: a
// cluster of protocol remoting whose endpoint is the 5.4.0 name server.
func (r *race) twinmqRun(batching bool) func(*testing.B, int, time.Duration, time.Duration) produceResult {
	return func(b *testing.B, c int, warmup, window time.Duration) produceResult {
		if err := r.newErr[batching]; err != nil {
			b.Fatal(err)
		}
		rp := r.producers[batching]
		if rp == nil {
			cfg := config.Default()
			cfg.Batching.Enabled = batching
			cfg.Topics = map[string]config.Topic{raceTopic: {Clusters: []config.Cluster{{
				Name: "rmq", Protocol: config.ProtocolRemoting, Endpoints: []string{r.namesrv},
				Topic: raceTopic, Weight: 100,
			}}}}
			reg := prometheus.NewRegistry()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			p, err := producer.New(ctx, producer.WithConfig(cfg), producer.WithRegisterer(reg))
			cancel()
			if err != nil {
				r.newErr[batching] = fmt.Errorf("twinmq producer over remoting (batching %v): %w", batching, err)
				b.Fatal(r.newErr[batching])
			}
			rp = &raceProducer{p: p, reg: reg}
			r.producers[batching] = rp
		}
		n0, sum0, _ := sdkHistogram(b, rp.reg, "twinmq_batch_size_items", 1)
		var probe chan [2]map[string]time.Duration
		if r.threads {
			// Read the threads on the window's schedule beside runProduce.
			probe = make(chan [2]map[string]time.Duration, 1)
			start := time.Now()
			go func() {
				time.Sleep(time.Until(start.Add(warmup)))
				t0 := threadCPU()
				time.Sleep(time.Until(start.Add(warmup + window)))
				probe <- [2]map[string]time.Duration{t0, threadCPU()}
			}()
		}
		res := runProduce(b, rp.p, raceTopic, c, warmup, window)
		if probe != nil {
			t := <-probe
			logThreads(b, t[0], t[1], res.rate*window.Seconds())
		}
		// Messages per request over the run, warm-up included.
		if n1, sum1, _ := sdkHistogram(b, rp.reg, "twinmq_batch_size_items", 1); n1 > n0 {
			b.ReportMetric((sum1-sum0)/float64(n1-n0), "msgs/request")
		}
		return res
	}
}

// javaRun is the run of the Java client in mode (unbatched or autobatch).
// The child times its own warm-up and window from the moment it reads the
// command; the CPU samples are taken here on the same schedule, which is
// off by the time a line takes to cross a pipe.
func (r *race) javaRun(mode string) func(*testing.B, int, time.Duration, time.Duration) produceResult {
	return func(b *testing.B, c int, warmup, window time.Duration) produceResult {
		if r.javaErr != nil {
			b.Fatal(r.javaErr)
		}
		if r.java == nil {
			j, err := startRaceJava(r.namesrv, r.dir)
			if err != nil {
				r.javaErr = err
				b.Fatal(err)
			}
			r.java = j
		}
		j := r.java
		b.ResetTimer()
		start := time.Now()
		if err := j.send(fmt.Sprintf("%s %d %.3f %.3f", mode, c, warmup.Seconds(), window.Seconds())); err != nil {
			b.Fatalf("java client: %v%s", err, j.stderrTail())
		}
		var t0, t1 map[string]time.Duration
		time.Sleep(time.Until(start.Add(warmup)))
		s0 := j.sampleCPU()
		if r.threads {
			t0 = threadCPU()
		}
		time.Sleep(time.Until(start.Add(warmup + window)))
		s1 := j.sampleCPU()
		if r.threads {
			t1 = threadCPU()
		}
		line, err := j.result(warmup + window + time.Minute)
		b.StopTimer()
		if err != nil {
			// Out of step with the child from here on: later runs fail too.
			r.javaErr = fmt.Errorf("java client: %w", err)
			b.Fatalf("%v%s", r.javaErr, j.stderrTail())
		}
		res, err := parseRaceLine(line)
		if err != nil {
			b.Fatalf("java client: %v%s", err, j.stderrTail())
		}
		if res.errors > 0 {
			b.Fatalf("java client: %d sends failed%s", res.errors, j.stderrTail())
		}
		if res.sent == 0 {
			b.Fatal("java client: no send completed in the window")
		}
		b.ReportMetric(res.gcMillis, "client-gc-ms")
		if r.threads {
			logThreads(b, t0, t1, float64(res.sent))
		}
		n := float64(res.sent)
		return produceResult{
			rate:      res.rate,
			p50:       res.p50,
			p99:       res.p99,
			clientCPU: float64((s1.self - s0.self).Microseconds()) / n,
			clientRQ:  float64((s1.selfWait - s0.selfWait).Microseconds()) / n,
			peerCPU:   float64((s1.peer - s0.peer).Microseconds()) / n,
			busy:      100 * float64(s1.busy-s0.busy) / float64(max(s1.total-s0.total, 1)),
		}
	}
}

func (r *race) record(key string, round int, rate float64) {
	if r.rates[key] == nil {
		r.rates[key] = map[int]float64{}
	}
	r.rates[key][round] = rate
}

// logRatios prints the targets as ratios of the sides' medians:
// twinmq batched at 64 senders against Java AutoBatch at 64, batched at 16
// against Java unbatched at 16, unbatched against 0.9 x Java unbatched at
// both. Beside each, the median of the same ratio taken round by round
// (the two sides of a pair run next to each other, so a round's ratio is
// less exposed to a change of the machine's load than a ratio of medians).
// Timings are a benchmark's output, never a pass/fail condition: it only
// prints (on standard output: a benchmark's log keeps ten lines).
func (r *race) logRatios() {
	ratio := func(name, mine, theirs string, want float64) {
		var as, ts, paired []float64
		for round, a := range r.rates[mine] {
			as = append(as, a)
			if t, ok := r.rates[theirs][round]; ok && t > 0 {
				paired = append(paired, a/t)
			}
		}
		for _, t := range r.rates[theirs] {
			ts = append(ts, t)
		}
		a, t := median(as), median(ts)
		if a == 0 || t == 0 {
			return
		}
		fmt.Printf("race: %-41s %9.0f / %9.0f = %.2f, by round %.2f (target >= %.1f)\n",
			name, a, t, a/t, median(paired), want)
	}
	ratio("twinmq batched c64 / java autobatch c64", "remoting_batched_c64", "java_autobatch_c64", 1)
	ratio("twinmq batched c16 / java unbatched c16", "remoting_batched_c16", "java_unbatched_c16", 1)
	ratio("twinmq unbatched c16 / java unbatched c16", "remoting_unbatched_c16", "java_unbatched_c16", 0.9)
	ratio("twinmq unbatched c64 / java unbatched c64", "remoting_unbatched_c64", "java_unbatched_c64", 0.9)
}

// median of vs (sorted in place), the mean of the middle two for an even
// count, 0 for none: what internal/benchfig reports for a figure.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	m := len(vs) / 2
	if len(vs)%2 == 1 {
		return vs[m]
	}
	return (vs[m-1] + vs[m]) / 2
}

func (r *race) close() error {
	var errs []error
	for _, rp := range r.producers {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, rp.p.Close(ctx))
		cancel()
	}
	if r.java != nil {
		errs = append(errs, r.java.close())
	}
	return errors.Join(errs...)
}

// raceJava is the Java client's process (io.github.twinmq.race.JavaSender
// in its stdin-driven form) with the goroutine that reads its answers; close
// ends both.
type raceJava struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string   // answers, closed at the child's end of output
	done   chan struct{} // closed when the reader has returned
	stderr string        // file holding the child's standard error
}

// startRaceJava starts the Java client with the java executable and the
// classpath that interop/run.sh built (TWINMQ_INTEROP_JAVA,
// TWINMQ_INTEROP_RACE_CP). The child's logs go under dir.
func startRaceJava(namesrv, dir string) (*raceJava, error) {
	javaBin, cp := os.Getenv("TWINMQ_INTEROP_JAVA"), os.Getenv("TWINMQ_INTEROP_RACE_CP")
	if javaBin == "" || cp == "" {
		return nil, errors.New("TWINMQ_INTEROP_JAVA or TWINMQ_INTEROP_RACE_CP is not set: run the benchmark with `make interop`")
	}
	home := filepath.Join(dir, "java")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	errPath := filepath.Join(dir, "java.stderr")
	errFile, err := os.Create(errPath)
	if err != nil {
		return nil, err
	}
	defer errFile.Close() // the child holds its own descriptor
	args := slices.Concat(raceJVM, []string{"-Duser.home=" + home, "-cp", cp,
		"io.github.twinmq.race.JavaSender", namesrv, raceTopic, strconv.Itoa(raceBodySize)})
	cmd := exec.Command(javaBin, args...)
	cmd.Stderr = errFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the java client: %w", err)
	}
	j := &raceJava{cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{}), stderr: errPath}
	go func() {
		defer close(j.done)
		defer close(j.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "RACE ") {
				j.lines <- line
			}
		}
	}()
	return j, nil
}

func (j *raceJava) send(cmd string) error {
	_, err := io.WriteString(j.stdin, cmd+"\n")
	return err
}

// result waits up to within for the answer to the last command.
func (j *raceJava) result(within time.Duration) (string, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case line, ok := <-j.lines:
		if !ok {
			return "", errors.New("the process ended without an answer")
		}
		return line, nil
	case <-t.C:
		return "", fmt.Errorf("no answer within %v", within)
	}
}

// sampleCPU reads the counters with the child as the client: self is the
// child's CPU, peer the other JVMs of the namespace.
func (j *raceJava) sampleCPU() cpuSample {
	pid := j.cmd.Process.Pid
	var s cpuSample
	s.self = procCPU("/proc/" + strconv.Itoa(pid))
	s.selfWait = runqWait("/proc/" + strconv.Itoa(pid))
	s.peer = peerCPU(pid)
	s.busy, s.total = machineCPU()
	return s
}

// stderrTail is the end of the child's standard error, for a failure
// message.
func (j *raceJava) stderrTail() string {
	data, err := os.ReadFile(j.stderr)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return "\n--- java client stderr (tail) ---\n" + string(data)
}

// close ends the child's input, which makes it shut its producers down and
// exit, and waits for it (killing it after 20 s) and for the reader.
func (j *raceJava) close() error {
	_ = j.stdin.Close()
	exited := make(chan error, 1)
	go func() {
		<-j.done // the reader drains stdout before Wait may close it
		exited <- j.cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("java client: %w%s", err, j.stderrTail())
		}
		return nil
	case <-time.After(20 * time.Second):
		_ = j.cmd.Process.Kill()
		<-exited
		return errors.New("java client did not exit within 20 s of the end of its input: killed")
	}
}

// raceLine is the Java client's answer to one run.
type raceLine struct {
	rate     float64
	p50, p99 time.Duration
	sent     int64
	errors   int64
	gcMillis float64
}

// parseRaceLine reads "RACE key=value ..." as JavaSender prints it.
func parseRaceLine(line string) (raceLine, error) {
	kv := map[string]string{}
	for _, f := range strings.Fields(strings.TrimPrefix(line, "RACE ")) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return raceLine{}, fmt.Errorf("bad answer %q", line)
		}
		kv[k] = v
	}
	num := func(k string) (float64, error) {
		v, ok := kv[k]
		if !ok {
			return 0, fmt.Errorf("answer %q has no %s", line, k)
		}
		return strconv.ParseFloat(v, 64)
	}
	var r raceLine
	var vals [6]float64
	for i, k := range []string{"msgs_s", "p50_ms", "p99_ms", "sent", "errors", "gc_ms"} {
		v, err := num(k)
		if err != nil {
			return raceLine{}, err
		}
		vals[i] = v
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	r.rate, r.p50, r.p99 = vals[0], ms(vals[1]), ms(vals[2])
	r.sent, r.errors, r.gcMillis = int64(vals[3]), int64(vals[4]), vals[5]
	return r, nil
}

// threadCPU sums the CPU time of the threads of the Java processes in this
// network namespace (the peer's, and the Java client's when it runs), by
// process and thread name, digits dropped so that a pool's threads add up
// ("NettyServerCodecThread_3" and "_4" are one line). The names are the
// kernel's, cut at 15 characters.
func threadCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return out
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		if ns, err := os.Readlink(dir + "/ns/net"); err != nil || ns != self {
			continue
		}
		comm, err := os.ReadFile(dir + "/comm")
		if err != nil || strings.TrimSpace(string(comm)) != "java" {
			continue
		}
		proc := "java:" + filepath.Base(dir)
		if cmdline, err := os.ReadFile(dir + "/cmdline"); err == nil {
			switch s := string(cmdline); {
			case strings.Contains(s, "JavaSender"):
				proc = "java-client"
			case strings.Contains(s, "NamesrvStartup"):
				proc = "namesrv"
			case strings.Contains(s, "broker-auth"):
				proc = "broker-auth"
			case strings.Contains(s, "ProxyStartup"):
				proc = "broker"
			}
		}
		tasks, _ := filepath.Glob(dir + "/task/[0-9]*")
		for _, task := range tasks {
			name, err := os.ReadFile(task + "/comm")
			if err != nil {
				continue
			}
			key := proc + " " + strings.TrimRight(strings.TrimSpace(string(name)), "0123456789-_#")
			out[key] += procCPU(task)
		}
	}
	return out
}

// logThreads prints the thread groups that used the most CPU between two
// threadCPU readings, with their share of the sends of the window.
func logThreads(b *testing.B, before, after map[string]time.Duration, sent float64) {
	type row struct {
		name string
		cpu  time.Duration
	}
	var rows []row
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			rows = append(rows, row{k, d})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.cpu - a.cpu) })
	for _, r := range rows[:min(len(rows), 12)] {
		fmt.Printf("    threads %s: %-40s %7.0f ms %7.2f us/msg\n", b.Name(), r.name, float64(r.cpu.Milliseconds()), float64(r.cpu.Microseconds())/max(sent, 1))
	}
}
