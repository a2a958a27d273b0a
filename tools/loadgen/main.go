// Command loadgen drives a floodgate server on loopback with many distinct
// client keys and prints throughput, latency percentiles, the status mix
// and the server's memory.
//
// It is bounded by design: it only talks to loopback addresses, stops after
// -duration (at most 5 minutes) or -max-requests, whichever comes first,
// and exits non-zero if any answer is neither the expected success nor the
// intended 429.
//
//	go run ./tools/loadgen -url 'http://127.0.0.1:18080/auth/available/user_id?userId=alice' \
//	    -keys 5000 -duration 30s -pid $(pgrep -f floodgate-example)
//
// Client keys are synthetic IPv4 addresses sent in X-Forwarded-For, so the
// server must trust the loopback peer (-trusted-proxy 127.0.0.1/32).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	maxDuration = 5 * time.Minute
	maxSamples  = 4 << 20 // latencies kept for percentiles (32 MiB)
)

type config struct {
	url         string
	duration    time.Duration
	maxRequests int64
	concurrency int
	keys        int
	pid         int
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://127.0.0.1:8080/auth/available/user_id?userId=alice", "target URL (loopback only)")
	flag.DurationVar(&c.duration, "duration", 30*time.Second, "how long to run (at most 5m)")
	flag.Int64Var(&c.maxRequests, "max-requests", 5_000_000, "stop after this many requests")
	flag.IntVar(&c.concurrency, "concurrency", 64, "concurrent connections")
	flag.IntVar(&c.keys, "keys", 5000, "distinct client IPs sent in X-Forwarded-For")
	flag.IntVar(&c.pid, "pid", 0, "server process id, to report its RSS (0: not reported)")
	flag.Parse()
	rep, err := run(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	if err := rep.print(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: writing the report:", err)
		os.Exit(2)
	}
	if rep.unexpected > 0 {
		os.Exit(1)
	}
}

// validate refuses anything that is not a bounded run against loopback.
func (c config) validate() error {
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("bad -url %q", c.url)
	}
	ips, err := net.LookupIP(u.Hostname())
	if err != nil {
		return fmt.Errorf("resolve %q: %v", u.Hostname(), err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("refusing non-loopback target %s (%s)", u.Hostname(), ip)
		}
	}
	switch {
	case c.duration <= 0 || c.duration > maxDuration:
		return fmt.Errorf("-duration must be in (0, %s]", maxDuration)
	case c.maxRequests <= 0:
		return errors.New("-max-requests must be positive")
	case c.concurrency <= 0 || c.concurrency > 4096:
		return errors.New("-concurrency must be in 1..4096")
	case c.keys <= 0 || c.keys > 1<<24:
		return errors.New("-keys must be in 1..16777216")
	}
	return nil
}

type report struct {
	elapsed      time.Duration
	requests     int64
	statuses     map[int]int64
	transport    int64 // connection or protocol errors
	unexpected   int64 // transport errors and statuses other than 2xx/429
	latencies    []time.Duration
	rssStart     int64
	rssEnd       int64
	rssPeak      int64
	firstFailure string
}

func run(ctx context.Context, c config) (*report, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()

	tr := &http.Transport{MaxIdleConnsPerHost: c.concurrency, MaxConnsPerHost: c.concurrency, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	rep := &report{statuses: map[int]int64{}}
	rep.rssStart = rss(c.pid)
	var (
		mu      sync.Mutex
		sent    atomic.Int64
		wg      sync.WaitGroup
		rssDone = make(chan struct{})
	)
	go func() { // sample the server's RSS once a second
		defer close(rssDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if v := rss(c.pid); v > 0 {
					mu.Lock()
					rep.rssPeak = max(rep.rssPeak, v)
					mu.Unlock()
				}
			}
		}
	}()

	start := time.Now()
	for w := 0; w < c.concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			local := map[int]int64{}
			var lat []time.Duration
			var transport int64
			var failure string
			for i := w; ctx.Err() == nil; i += c.concurrency {
				if sent.Add(1) > c.maxRequests {
					break
				}
				status, d, err := do(ctx, client, c.url, clientIP(i%c.keys))
				if err != nil {
					if ctx.Err() != nil {
						break // the run ended mid-request: not a server error
					}
					transport++
					if failure == "" {
						failure = err.Error()
					}
					continue
				}
				local[status]++
				if len(lat) < maxSamples/c.concurrency {
					lat = append(lat, d)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for s, n := range local {
				rep.statuses[s] += n
				rep.requests += n
			}
			rep.transport += transport
			rep.requests += transport
			rep.latencies = append(rep.latencies, lat...)
			if rep.firstFailure == "" {
				rep.firstFailure = failure
			}
		}(w)
	}
	wg.Wait()
	rep.elapsed = time.Since(start)
	cancel()
	<-rssDone
	rep.rssEnd = rss(c.pid)
	rep.rssPeak = max(rep.rssPeak, rep.rssEnd, rep.rssStart)
	rep.unexpected = rep.transport
	for s, n := range rep.statuses {
		if (s < 200 || s >= 300) && s != http.StatusTooManyRequests {
			rep.unexpected += n
		}
	}
	slices.Sort(rep.latencies)
	return rep, nil
}

func do(ctx context.Context, client *http.Client, target, ip string) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header["X-Forwarded-For"] = []string{ip}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	return resp.StatusCode, d, nil
}

// clientIP maps i to a distinct address in 10.0.0.0/8 (header value only:
// nothing is ever sent to it).
func clientIP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i))
}

// rss reads a process's resident set size in bytes from /proc.
func rss(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (r *report) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.latencies)-1) * p)
	return r.latencies[i]
}

// print writes the report to w. It returns the first write error: a report
// lost to a closed stdout must not pass for a clean run.
func (r *report) print(w io.Writer) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p("requests      %d in %s (%.0f req/s)\n", r.requests, r.elapsed.Round(time.Millisecond), float64(r.requests)/r.elapsed.Seconds())
	p("latency       p50 %s  p90 %s  p99 %s  max %s\n",
		r.percentile(0.50), r.percentile(0.90), r.percentile(0.99), r.percentile(1))
	codes := make([]int, 0, len(r.statuses))
	for s := range r.statuses {
		codes = append(codes, s)
	}
	slices.Sort(codes)
	for _, s := range codes {
		p("status %d    %d\n", s, r.statuses[s])
	}
	p("unexpected    %d (transport errors %d)\n", r.unexpected, r.transport)
	if r.firstFailure != "" {
		p("first error   %s\n", r.firstFailure)
	}
	if r.rssStart > 0 {
		p("server RSS    start %.1f MiB  end %.1f MiB  peak %.1f MiB\n",
			mib(r.rssStart), mib(r.rssEnd), mib(r.rssPeak))
	}
	return err
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
