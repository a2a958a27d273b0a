package grpclimit_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	_ "google.golang.org/grpc/health" // registers client-side health checking
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// retryConfig is a standard service-config retry policy:
// RESOURCE_EXHAUSTED retryable, 5 attempts, backoffs far longer than the
// limit's wait, so that only the server's pushback can explain a retry
// that comes in time.
const retryConfig = `{"methodConfig": [{
	"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {
		"maxAttempts": 5,
		"initialBackoff": "5s",
		"maxBackoff": "10s",
		"backoffMultiplier": 2,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	}
}]}`

// TestRetryPolicySucceedsAfterTheWait: a grpc-go client with a standard
// retry policy, denied once the quota is spent, retries after the
// limit's own wait (grpc-retry-pushback-ms, honoured on a Trailers-Only
// answer) and succeeds, in at most 3 attempts, long before its own
// backoff (5 s) would have retried. The limit's period is real and short
// (60 ms a unit): the client sleeps in real time.
func TestRetryPolicySucceedsAfterTheWait(t *testing.T) {
	var attempts atomic.Int32
	ic, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: 60 * time.Millisecond}),
		grpclimit.WithDecisionHook(func(floodgate.DecisionEvent) { attempts.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	s := serveOn(t, ic)
	client := testpb.NewTestServiceClient(s.dial(t, grpc.WithDefaultServiceConfig(retryConfig)))
	if _, err := client.EmptyCall(ctxTimeout(t), &testpb.Empty{}); err != nil {
		t.Fatal(err) // spends the quota
	}
	attempts.Store(0)
	start := time.Now()
	_, err = client.EmptyCall(ctxTimeout(t), &testpb.Empty{})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the retried call failed after %d attempts: %v", attempts.Load(), err)
	}
	if n := attempts.Load(); n < 2 || n > 3 {
		t.Errorf("%d attempts, want 2 or 3 (denied, then allowed after the pushback)", n)
	}
	if took > 3*time.Second {
		t.Errorf("the call took %v: the client waited for its own backoff, not the pushback", took)
	}
	if got := s.svc.empties.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2", got)
	}
}

// TestHealthCheckedChannelSurvivesSpentQuota: a client with grpc-go's
// client-side health checking opens a Watch stream on the health service
// when it connects, and treats a refused Watch as an unhealthy server.
// With the quota of its address spent (by another connection), its calls
// are ResourceExhausted, never Unavailable, and the channel is READY;
// limiting the health service too (WithLimitHealth) is what takes such a
// channel down.
func TestHealthCheckedChannelSurvivesSpentQuota(t *testing.T) {
	const healthConfig = `{"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}`
	for _, limitHealth := range []bool{false, true} {
		opts := []grpclimit.Option{}
		if limitHealth {
			opts = append(opts, grpclimit.WithLimitHealth())
		}
		ic, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 2, Period: time.Hour}, newClock().option()), opts...)
		if err != nil {
			t.Fatal(err)
		}
		s := serveOn(t, ic)
		plain := testpb.NewTestServiceClient(s.dial(t))
		for range 3 {
			_, _ = plain.EmptyCall(ctxTimeout(t), &testpb.Empty{}) // spends the address's quota
		}
		conn := s.dial(t, grpc.WithDefaultServiceConfig(healthConfig))
		client := testpb.NewTestServiceClient(conn)
		var seen []codes.Code
		for range 3 {
			_, err := client.EmptyCall(ctxTimeout(t), &testpb.Empty{})
			seen = append(seen, status.Code(err))
		}
		if !limitHealth {
			state := readyState(t, conn)
			want := []codes.Code{codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted}
			if !equalCodes(seen, want) || state != connectivity.Ready {
				t.Errorf("health exempt: codes %v, channel %v; want %v and READY", seen, state, want)
			}
			continue
		}
		want := []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable}
		if !equalCodes(seen, want) {
			t.Errorf("health limited: codes %v; want %v, as the issue reports", seen, want)
		}
	}
}

// readyState waits, at most 5 s, for the channel to be READY (it may pass
// through CONNECTING as the health stream settles), and returns its state.
func readyState(t *testing.T, conn *grpc.ClientConn) connectivity.State {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	state := conn.GetState()
	for state != connectivity.Ready && conn.WaitForStateChange(ctx, state) {
		state = conn.GetState()
	}
	return state
}

func equalCodes(a, b []codes.Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDenialIsTrailersOnlyOnTheWire speaks HTTP/2 to the server itself
// and reads the frames of a denied call: one HEADERS frame that ends the
// stream (Trailers-Only), holding :status 200, grpc-status 8, the
// RetryInfo (grpc-status-details-bin), grpc-retry-pushback-ms,
// retry-after and the quota fields; no DATA, no second HEADERS. The
// allowed call before it carries no quota field in any frame by default,
// and the quota in its headers under WithQuotaOnAllowed.
func TestDenialIsTrailersOnlyOnTheWire(t *testing.T) {
	for _, quotaOnAllowed := range []bool{false, true} {
		var opts []grpclimit.Option
		if quotaOnAllowed {
			opts = append(opts, grpclimit.WithQuotaOnAllowed())
		}
		ic, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Minute}, newClock().option()), opts...)
		if err != nil {
			t.Fatal(err)
		}
		s := serveOn(t, ic)
		allowed := rawCall(t, s.addr)
		denied := rawCall(t, s.addr)

		if len(allowed) < 2 || allowed[0].endStream {
			t.Fatalf("allowed call: frames %+v; want headers, then data and trailers", allowed)
		}
		for i, f := range allowed {
			want := map[string]string{}
			if quotaOnAllowed && i == 0 {
				want = map[string]string{"ratelimit": `"default";r=0;t=60`, "ratelimit-policy": `"default";q=1;w=60`}
			}
			for _, name := range []string{"ratelimit", "ratelimit-policy"} {
				if f.fields[name] != want[name] {
					t.Errorf("quota on allowed calls %v: allowed call's frame %d: %s = %q, want %q (frames %+v)", quotaOnAllowed, i, name, f.fields[name], want[name], allowed)
				}
			}
		}
		if len(denied) != 1 || !denied[0].endStream {
			t.Fatalf("denied call: frames %+v; want one HEADERS frame ending the stream", denied)
		}
		f := denied[0].fields
		for name, want := range map[string]string{
			":status": "200", "grpc-status": "8", "grpc-retry-pushback-ms": "60000", "retry-after": "60",
			"ratelimit": `"default";r=0;t=60`, "ratelimit-policy": `"default";q=1;w=60`,
		} {
			if f[name] != want {
				t.Errorf("denied call: %s = %q, want %q (fields %v)", name, f[name], want, f)
			}
		}
		if f["grpc-status-details-bin"] == "" {
			t.Errorf("denied call: no grpc-status-details-bin (RetryInfo): %v", f)
		}
	}
}

// frame is one HEADERS or DATA frame of a raw call.
type frame struct {
	kind      string
	endStream bool
	fields    map[string]string
}

// rawCall makes one EmptyCall over a fresh HTTP/2 connection, by hand,
// and returns the frames of its stream.
func rawCall(t *testing.T, addr string) []frame {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.testing.TestService/EmptyCall"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []error{
		fr.WriteSettings(),
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}),
		fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}), // one empty message
	}
	for _, err := range steps {
		if err != nil {
			t.Fatal(err)
		}
	}
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var frames []frame
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (so far %+v)", err, frames)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.MetaHeadersFrame:
			fields := map[string]string{}
			for _, hf := range f.Fields {
				fields[strings.ToLower(hf.Name)] = hf.Value
			}
			frames = append(frames, frame{kind: "HEADERS", endStream: f.StreamEnded(), fields: fields})
			if f.StreamEnded() {
				return frames
			}
		case *http2.DataFrame:
			frames = append(frames, frame{kind: "DATA", endStream: f.StreamEnded()})
			if f.StreamEnded() {
				return frames
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			t.Fatalf("the server reset the call: %v", f)
		}
	}
}
