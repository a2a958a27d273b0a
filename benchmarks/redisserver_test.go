package benchmarks

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis cases run against FLOODGATE_REDIS_ADDR when it is set, and
// otherwise against a redis-server this process starts on loopback and
// stops when it exits. Without either they are skipped, unless
// FLOODGATE_REQUIRE_SERVERS=1 (as in CI) makes that a failure.

var redisServer struct {
	once sync.Once
	addr string
	cmd  *exec.Cmd
	err  error
}

// stopRedis stops the server this process started, if any.
func stopRedis() {
	if redisServer.cmd != nil {
		_ = redisServer.cmd.Process.Kill()
		_ = redisServer.cmd.Wait()
	}
}

// redisClient returns a client of the shared server and its address. The
// client has go-redis's default options (a pool of 10 connections per
// GOMAXPROCS) and ContextTimeoutEnabled, as redisstore's README asks, and
// every go-redis library here shares it.
func redisClient(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	redisServer.once.Do(func() { redisServer.addr, redisServer.err = findRedis() })
	if redisServer.err != nil {
		if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
			tb.Fatalf("Redis required: %v", redisServer.err)
		}
		tb.Skipf("skipping the Redis cases: %v", redisServer.err)
	}
	c := redis.NewClient(&redis.Options{Addr: redisServer.addr, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c, redisServer.addr
}

func findRedis() (string, error) {
	if addr := os.Getenv("FLOODGATE_REDIS_ADDR"); addr != "" {
		return addr, ping(addr)
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("no FLOODGATE_REDIS_ADDR and no redis-server in PATH (apt-get install redis-server)")
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// No persistence: the cases measure decisions, not disk writes.
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--protected-mode", "yes")
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting redis-server: %w", err)
	}
	redisServer.cmd = cmd
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := ping(addr)
		if err == nil {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
