// Package redistest starts throwaway redis-server processes for the
// redisstore tests: a single server on a free loopback port, a
// three-master Redis Cluster, or a master, a replica and a Sentinel, each
// in its own temporary directory with persistence off.
//
// Tests use REDIS_ADDR instead of a server of their own when it is set
// (Shared). When neither is possible they skip, saying how to run them;
// with FLOODGATE_REQUIRE_SERVERS=1 (set by CI) the skip is a failure.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// howTo is appended to every skip.
const howTo = "install redis-server (apt-get install redis-server) so the tests can start one, " +
	"or set REDIS_ADDR=host:port to use a running server"

// unavailable skips tb, or fails it when FLOODGATE_REQUIRE_SERVERS=1.
func unavailable(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
		tb.Fatalf("%s (FLOODGATE_REQUIRE_SERVERS=1 forbids skipping): %s", why, howTo)
	}
	tb.Skipf("%s: %s", why, howTo)
}

// Server is a redis-server process started by this package.
type Server struct {
	// Addr is the server's host:port on the loopback interface.
	Addr string
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
	// resume continues a process stopped by Pause; nil when running.
	resume func() error
}

// Start starts a redis-server on a free loopback port, with persistence
// off, and stops it when tb ends. extra is passed on the command line (for
// example "--cluster-enabled", "yes"). It skips tb when redis-server is not
// installed.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := start(tb.TempDir(), extra)
	if errors.Is(err, exec.ErrNotFound) {
		unavailable(tb, "redis-server is not installed")
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start(dir string, extra []string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, err
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
		}, extra...)
		if last = s.Restart(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

// freePort returns a loopback port that was free a moment ago, with the
// cluster bus port (port + 10000) free as well.
func freePort() (int, error) {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port pair found")
}

// Restart starts the server again on the same port after Stop (or for the
// first time), and waits until it answers PING.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("redistest: server already running")
	}
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port)))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return err
	}
	_ = log.Close()
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if reply, err := Do(s.Addr, "PING"); err == nil && reply == "+PONG" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stopLocked()
	out, _ := os.ReadFile(log.Name())
	return fmt.Errorf("redistest: redis-server on %s did not start: %s", s.Addr, out)
}

// Stop kills the server (its data is lost: persistence is off) and waits
// for it to exit. It is a no-op on a stopped server.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	// A stopped process holds its signals until continued: resume it
	// first, so that it dies now and a later Restart finds it gone.
	if s.resume != nil {
		_ = s.resume()
		s.resume = nil
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Do sends one command in the inline protocol over a fresh connection and
// returns the first line of the reply (for a bulk reply, its content
// follows; use Info for multi-line replies).
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", strings.Join(args, " ")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// Info returns the text of INFO section from addr.
func Info(addr, section string) (string, error) { return Bulk(addr, "INFO", section) }

// Bulk sends one command whose reply is a bulk string (INFO, CLUSTER INFO)
// and returns that string.
func Bulk(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", strings.Join(args, " ")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("redistest: %s reply %q", args[0], head)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return "", err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the address of the server a test package shares:
// REDIS_ADDR when set, otherwise a redis-server started on first use and
// stopped by Main. It skips tb when neither is possible.
func Shared(tb testing.TB) string {
	tb.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			shared.err = err
			return
		}
		shared.srv, shared.err = start(dir, nil)
	})
	if errors.Is(shared.err, exec.ErrNotFound) {
		unavailable(tb, "REDIS_ADDR is not set and redis-server is not installed")
	}
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.srv.Addr
}

// MainWithServer is Main for a package whose examples need a server too
// (an example cannot skip): it gets the shared server first and hands its
// address to use. When there is none it runs nothing and exits 0 after
// saying how to run the tests, or 1 with FLOODGATE_REQUIRE_SERVERS=1.
func MainWithServer(m *testing.M, use func(addr string)) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		dir, err := os.MkdirTemp("", "redistest-")
		if err == nil {
			shared.once.Do(func() { shared.srv, shared.err = start(dir, nil) })
			err = shared.err
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "no Redis for these tests (%v): %s\n", err, howTo)
			if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
				os.Exit(1)
			}
			fmt.Println("SKIP: no Redis")
			os.Exit(0)
		}
		addr = shared.srv.Addr
	}
	use(addr)
	Main(m)
}

// Main runs the tests of a package that uses Shared and then stops the
// shared server: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
		_ = os.RemoveAll(shared.srv.dir)
	}
	os.Exit(code)
}
