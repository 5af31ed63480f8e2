package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServiceBinEnv names a service binary already built from this tree:
// the test command builds it once (scripts/test.sh) and every package's
// process tests run it, instead of each linking its own.
const ServiceBinEnv = "FLASHSALE_SERVICE_BIN"

// BuildService builds the service binary of this module into dir and
// returns its path, or returns the binary ServiceBinEnv names. It runs the
// go command, so the working directory must be inside the module (a
// test's is).
func BuildService(dir string) (string, error) {
	if bin := os.Getenv(ServiceBinEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", ServiceBinEnv, err)
		}
		return bin, nil
	}
	bin := filepath.Join(dir, "flashsale")
	out, err := exec.Command("go", "build", "-o", bin, "flashsale").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// ServiceReadyTimeout bounds how long StartService and Service.Start wait
// for /readyz.
const ServiceReadyTimeout = 30 * time.Second

// Service is the service binary running as a real OS process on a loopback
// port of its own, which it keeps across restarts, so that clients can
// keep its address while it is killed and started again.
type Service struct {
	// Base is the service's URL, http://127.0.0.1:port.
	Base string
	bin  string
	env  []string
	out  *tailBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}    // closed when cmd has exited
	state  *os.ProcessState // how cmd exited, once exited is closed
}

// StartService starts bin on a free loopback port with env added to this
// process's environment (later values win) and waits until it is ready.
// The caller kills it; it is also killed if this process dies
// (Pdeathsig), so that no node outlives its test or fault suite.
//
// The port is free when chosen and bound by the service only after its
// start-up: a process of another test may take it in between, and the
// service then exits at once; it is started again on another port, up to
// five times.
func StartService(ctx context.Context, bin string, env map[string]string) (*Service, error) {
	var err error
	for range 5 {
		var port int
		if port, err = freePort(); err != nil {
			return nil, fmt.Errorf("service port: %w", err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		s := &Service{Base: "http://" + addr, bin: bin, out: &tailBuffer{max: 1 << 20}}
		s.env = append(os.Environ(), "HTTP_ADDR="+addr)
		for k, v := range env {
			s.env = append(s.env, k+"="+v)
		}
		if err = s.Start(ctx); err == nil {
			return s, nil
		}
		if !strings.Contains(s.out.tail(2000), "address already in use") {
			return nil, err
		}
	}
	return nil, err
}

// Start starts a killed service again on its address and waits until it is
// ready. It fails at once if the process exits (for example because its
// database refuses connections at start-up), with the end of its output.
func (s *Service) Start(ctx context.Context) error {
	if !s.Running() {
		s.Kill() // a process that exited by itself: forget it
	}
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("start service: already running")
	}
	cmd := exec.Command(s.bin)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start service: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		s.mu.Lock()
		s.state = cmd.ProcessState
		s.mu.Unlock()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, ServiceReadyTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Base+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			s.Kill()
			return fmt.Errorf("service exited at start; output ends:\n%s", s.out.tail(2000))
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("service not ready: %w; output ends:\n%s", ctx.Err(), s.out.tail(2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill stops the service at once (SIGKILL) and waits for the process to
// exit; a no-op when it is not running.
func (s *Service) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Stop sends sig (SIGTERM: a graceful shutdown) and waits up to timeout
// for the process to exit, returning its exit code; past timeout it kills
// the process and says so.
func (s *Service) Stop(sig os.Signal, timeout time.Duration) (exitCode int, err error) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return 0, errors.New("stop service: not running")
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("stop service: %w", err)
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		s.Kill()
		return 0, fmt.Errorf("stop service: still running %s after %v; killed", timeout, sig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmd, s.exited = nil, nil
	return s.state.ExitCode(), nil
}

// Running reports whether the process was started and has not exited.
func (s *Service) Running() bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Output is the end of what the service printed (its logs), across
// restarts.
func (s *Service) Output() string { return s.out.tail(s.out.max) }

// tailBuffer keeps the last max bytes written to it: a node of a long
// fault run logs every retry, and only the end is read.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
