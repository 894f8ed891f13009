package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one broker running as its own OS process (the twinmq-broker
// command with -broker), restartable on the same data dir and port.
type proc struct {
	binary, config, name, listen string
	log                          *os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
}

// clusterFile is the part of the twinmq-broker config the campaign uses.
type clusterFile struct {
	Cluster  string         `json:"cluster"`
	DataDir  string         `json:"dataDir"`
	Flush    string         `json:"flush"`
	LogLevel string         `json:"logLevel"`
	Limits   map[string]any `json:"limits"`
	Brokers  []brokerFile   `json:"brokers"`
	Topics   []topicFile    `json:"topics"`
	Groups   []groupFile    `json:"groups"`
}

type brokerFile struct {
	Name      string `json:"name"`
	Listen    string `json:"listen"`
	Advertise string `json:"advertise"`
}

type topicFile struct {
	Name   string `json:"name"`
	Queues int    `json:"queues"`
	Type   string `json:"type"`
}

type groupFile struct {
	Name                string `json:"name"`
	MaxDeliveryAttempts int    `json:"maxDeliveryAttempts"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// freePort returns a loopback address nobody listens on right now.
func freePort() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := lis.Addr().String()
	return addr, lis.Close()
}

// start runs the process and waits until it accepts connections.
func (p *proc) start(ctx context.Context) error {
	cmd := exec.Command(p.binary, "-config", p.config, "-broker", p.name) //nolint:gosec // G204: the broker binary this harness built, with its own config

	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("broker %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", p.listen, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("broker %s exited while starting (see its log)", p.name)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("broker %s not serving on %s: %w", p.name, p.listen, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("not started")
	}
	return p.cmd.Process.Signal(sig)
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *proc) kill9() {
	_ = p.signal(syscall.SIGKILL)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	<-done
}

// stop ends the process cleanly (SIGCONT first, in case it is stopped),
// with a SIGKILL after timeout.
func (p *proc) stop(timeout time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// buildBroker builds the twinmq-broker command into dir.
func buildBroker(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "twinmq-broker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/twinmq/twinmq/cmd/twinmq-broker") //nolint:gosec // G204: builds this module's own broker into a temporary directory

	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build twinmq-broker: %w: %s", err, b)
	}
	return out, nil
}
