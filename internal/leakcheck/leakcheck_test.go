package leakcheck

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

// fakeM stands for *testing.M: run is the "tests".
type fakeM struct {
	run  func()
	code int
}

func (f fakeM) Run() int {
	f.run()
	return f.code
}

func TestVerifyReportsGoroutineLeftBehind(t *testing.T) {
	stop := make(chan struct{})
	var done sync.WaitGroup
	defer func() { close(stop); done.Wait() }()

	var out bytes.Buffer
	code := verify(fakeM{run: func() {
		done.Add(1)
		go parkUntil(stop, &done)
	}}, options{timeout: 50 * time.Millisecond, out: &out})

	if code != 1 {
		t.Fatalf("exit code %d, want 1 for a leaked goroutine", code)
	}
	if !strings.Contains(out.String(), "internal/leakcheck.parkUntil") {
		t.Fatalf("report does not show the leaked goroutine's stack:\n%s", out.String())
	}
}

// parkUntil is a goroutine of this module's code (the report must name it),
// declared outside the test so its frame is not one of leakcheck's tests.
func parkUntil(stop chan struct{}, done *sync.WaitGroup) {
	defer done.Done()
	<-stop
}

func TestVerifyWaitsForGoroutineThatIsEnding(t *testing.T) {
	var out bytes.Buffer
	code := verify(fakeM{run: func() {
		go time.Sleep(30 * time.Millisecond) // ends on its own, after Run returned
	}}, options{timeout: 5 * time.Second, out: &out})
	if code != 0 {
		t.Fatalf("exit code %d, want 0: the goroutine ended within the wait\n%s", code, out.String())
	}
}

func TestVerifyKeepsFailingCodeAndSkipsCheck(t *testing.T) {
	stop := make(chan struct{})
	var done sync.WaitGroup
	defer func() { close(stop); done.Wait() }()
	var out bytes.Buffer
	code := verify(fakeM{code: 3, run: func() {
		done.Add(1)
		go parkUntil(stop, &done)
	}}, options{timeout: time.Millisecond, out: &out})
	if code != 3 || out.Len() != 0 {
		t.Fatalf("code %d, report %q; want the tests' own code 3 and no report", code, out.String())
	}
}

// An open gRPC connection leaves only gRPC's goroutines, created by gRPC
// functions from goroutines that are gone: they must still count.
func TestVerifyReportsUnclosedGRPCConn(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()

	var cc *grpc.ClientConn
	var out bytes.Buffer
	code := verify(fakeM{run: func() {
		var err error
		cc, err = grpc.NewClient("passthrough:///"+lis.Addr().String(),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Error(err)
			return
		}
		cc.Connect()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for s := cc.GetState(); s.String() != "READY"; s = cc.GetState() {
			if !cc.WaitForStateChange(ctx, s) {
				t.Error("connection never became ready")
				return
			}
		}
	}}, options{timeout: 50 * time.Millisecond, out: &out})
	if cc != nil {
		defer cc.Close()
	}
	if code != 1 || !strings.Contains(out.String(), "google.golang.org/grpc") {
		t.Fatalf("code %d, want 1 and gRPC stacks in the report:\n%s", code, out.String())
	}
}

func TestIgnoreCreatedBy(t *testing.T) {
	stop := make(chan struct{})
	var done sync.WaitGroup
	defer func() { close(stop); done.Wait() }()
	code := verify(fakeM{run: func() {
		done.Add(1)
		go parkUntil(stop, &done)
	}}, options{timeout: time.Millisecond, out: new(bytes.Buffer),
		ignore: []string{modulePrefix + "internal/leakcheck.TestIgnoreCreatedBy"}})
	if code != 0 {
		t.Fatalf("code %d, want 0: the goroutine's creator is ignored", code)
	}
}

// fakeTB records what Check reports.
type fakeTB struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Failed() bool              { return len(f.errors) > 0 }
func (f *fakeTB) Cleanup(fn func())         { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(s string, a ...any) { f.errors = append(f.errors, fmt.Sprintf(s, a...)) }
func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestCheck(t *testing.T) {
	stop := make(chan struct{})
	var done sync.WaitGroup
	defer func() { close(stop); done.Wait() }()

	clean := &fakeTB{}
	Check(clean, WithTimeout(50*time.Millisecond))
	clean.runCleanups()
	if len(clean.errors) != 0 {
		t.Fatalf("a test that started nothing was reported: %v", clean.errors)
	}

	leaky := &fakeTB{}
	Check(leaky, WithTimeout(50*time.Millisecond))
	done.Add(1)
	go parkUntil(stop, &done)
	leaky.runCleanups()
	if len(leaky.errors) != 1 || !strings.Contains(leaky.errors[0], "parkUntil") {
		t.Fatalf("leak not reported with its stack: %v", leaky.errors)
	}
}

func TestParse(t *testing.T) {
	dump := `goroutine 7 [chan receive, 2 minutes]:
github.com/twinmq/twinmq/producer.(*Producer).routeLoop(0xc000123)
	/src/producer/producer.go:200 +0x45
created by github.com/twinmq/twinmq/producer.New in goroutine 6
	/src/producer/producer.go:195 +0x99

goroutine 9 [select]:
google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run(0xc0001)
	/mod/grpc/internal/grpcsync/callback_serializer.go:88 +0x10
...additional frames elided...
created by google.golang.org/grpc/internal/grpcsync.NewCallbackSerializer in goroutine 7
	/mod/grpc/internal/grpcsync/callback_serializer.go:52 +0x11
`
	gs := parse([]byte(dump))
	if len(gs) != 2 {
		t.Fatalf("parsed %d goroutines, want 2", len(gs))
	}
	g := gs[0]
	if g.id != 7 || g.state != "chan receive, 2 minutes" || g.parent != 6 ||
		g.createdBy != "github.com/twinmq/twinmq/producer.New" ||
		len(g.funcs) != 1 || g.funcs[0] != "github.com/twinmq/twinmq/producer.(*Producer).routeLoop" {
		t.Fatalf("first goroutine parsed as %+v", g)
	}
	byID := map[int]goroutine{7: gs[0], 9: gs[1]}
	if o := owner(gs[1], byID, 0); o != "github.com/twinmq/twinmq/producer.(*Producer).routeLoop" {
		t.Fatalf("gRPC goroutine attributed to %q, want its live creator's frame", o)
	}
	if o := owner(gs[1], byID, 7); o != "" {
		t.Fatalf("with the checker as its creator, owner is %q, want none", o)
	}
	delete(byID, 7)
	if o := owner(gs[1], byID, 0); o != "" {
		t.Fatalf("with its creator gone, owner is %q, want none", o)
	}
}
