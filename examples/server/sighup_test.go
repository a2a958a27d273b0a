//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The server binary, built once per test process (-count=20 runs the
// tests twenty times, not the build).
var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	binaryDir  string
)

func serverBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		binaryDir, binaryErr = os.MkdirTemp("", "floodgate-server-")
		if binaryErr != nil {
			return
		}
		binaryPath = filepath.Join(binaryDir, "server")
		out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// process is the server binary running, its log lines on a channel.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	logs chan map[string]any
}

// startBinary starts the binary with args on a free loopback port and
// waits for its "listening" line.
func startBinary(t *testing.T, args ...string) *process {
	t.Helper()
	cmd := exec.Command(serverBinary(t), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "TURNSTILE_SECRET=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, cmd: cmd, logs: make(chan map[string]any, 100)}
	go p.readLogs(stderr)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	p.addr = fmt.Sprint(p.waitLog("listening", "")["addr"])
	return p
}

func (p *process) readLogs(r io.Reader) {
	defer close(p.logs)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			p.logs <- line
		}
	}
}

// waitLog returns the next log line with message msg (and, if error is
// not empty, an error containing it), failing after 10 s.
func (p *process) waitLog(msg, errorText string) map[string]any {
	p.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-p.logs:
			if !ok {
				p.t.Fatalf("server exited before logging %q", msg)
			}
			if line["msg"] == msg && strings.Contains(fmt.Sprint(line["error"]), errorText) {
				return line
			}
		case <-timeout:
			p.t.Fatalf("no %q logged in 10 s", msg)
		}
	}
}

// hangUp sends the process SIGHUP.
func (p *process) hangUp() {
	p.t.Helper()
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		p.t.Fatal(err)
	}
}

// probe sends a username probe and returns its status and
// RateLimit-Policy.
func (p *process) probe() (int, string) {
	p.t.Helper()
	resp, err := http.Get("http://" + p.addr + "/auth/available/user_id?userId=newuser")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
}

// expectProbes checks the statuses of successive probes, and the quota
// each is answered under.
func (p *process) expectProbes(quota string, statuses ...int) {
	p.t.Helper()
	for i, want := range statuses {
		if got, policy := p.probe(); got != want || policy != `"probe";q=`+quota+";w=86400" {
			p.t.Fatalf("probe %d: %d under %q, want %d under q=%s;w=86400", i, got, policy, want, quota)
		}
	}
}

func probeFile(limit int) string {
	return fmt.Sprintf(`{"policies": [{"name": "probe", "routes": ["GET /auth/available/user_id"],
		"key": {"ip": {}}, "rate": {"limit": %d, "period": "24h", "algorithm": "token_bucket"}}]}`, limit)
}

// TestServerReloadsOnSIGHUP: the server binary, started with a policy
// file, takes the rewritten file on SIGHUP (the probe's limit from 2 to
// 4 a day: the 2 probes spent stay spent, 2 more pass); a broken file
// on the next SIGHUP is logged and refused, and the limit of 4 holds.
// A server without a file ignores SIGHUP rather than dying of it.
func TestServerReloadsOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(probeFile(2))
	p := startBinary(t, "-policies", path)
	p.expectProbes("2", 200, 200, 429)

	write(probeFile(4))
	p.hangUp()
	line := p.waitLog("policies reloaded", "")
	if fmt.Sprint(line["changed"]) != "[probe]" {
		t.Errorf("reload logged %v, want probe changed", line)
	}
	p.expectProbes("4", 200, 200, 429)

	write(strings.Replace(probeFile(4), `"limit": 4`, `"limit": 0`, 1))
	p.hangUp()
	p.waitLog("policy file refused, limits unchanged", "policies[0].rate.limit: must be > 0")
	p.expectProbes("4", 429)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLog("stopped", "")
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("server exit: %v", err)
	}
}

func TestServerWithoutFileIgnoresSIGHUP(t *testing.T) {
	p := startBinary(t)
	p.hangUp()
	p.waitLog("SIGHUP ignored: the built-in limits have no file to reload (see -policies)", "")
	resp, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz after SIGHUP: %d", resp.StatusCode)
	}
}
