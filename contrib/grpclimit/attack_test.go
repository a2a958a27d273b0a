package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Guesses against a victim's password on a login limited per user, then
// per IP (leniently, for users behind one NAT).
const (
	guessLimit = 3
	guesses    = 20
)

// userReaders are the ways a handler reads the user from the values of a
// metadata key.
var userReaders = []struct {
	name string
	read func([]string) string
}{
	{"first", func(vs []string) string { return nth(vs, 0) }},
	{"last", func(vs []string) string { return nth(vs, len(vs)-1) }},
	{"first non-empty", func(vs []string) string { return nonEmpty(vs, false) }},
	{"last non-empty", func(vs []string) string { return nonEmpty(vs, true) }},
}

func nth(vs []string, i int) string {
	if i < 0 || i >= len(vs) {
		return ""
	}
	return strings.TrimSpace(vs[i])
}

func nonEmpty(vs []string, fromEnd bool) string {
	for i := range vs {
		if fromEnd {
			i = len(vs) - 1 - i
		}
		if v := strings.TrimSpace(vs[i]); v != "" {
			return v
		}
	}
	return ""
}

// loginService answers every guess "wrong password", counting for each
// of userReaders the guesses it would have acted on against "victim".
type loginService struct {
	testpb.UnimplementedTestServiceServer
	acted [4]atomic.Int32
}

func (s *loginService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	vs := metadata.ValueFromIncomingContext(ctx, "x-user")
	for i, r := range userReaders {
		if r.read(vs) == "victim" {
			s.acted[i].Add(1)
		}
	}
	return nil, status.Error(codes.Unauthenticated, "wrong password")
}

// TestRepeatedMetadataAttacks: issue 18, a metadata key given several
// values. KeyByMetadata keyed by the first value only: "x-user: x<i>,
// x-user: victim" was counted under x<i>, and "x-user: (empty), x-user:
// victim" fell back to the IP policy, while a handler reading the last
// non-empty value acted on victim: 20 of 20 guesses, from a real grpc-go
// client, on a limit of 3. Values that differ are now ErrAmbiguousKey,
// InvalidArgument under every error policy, as floodgate.KeyByHeader
// refuses header lines that differ; a value repeated alike is counted.
func TestRepeatedMetadataAttacks(t *testing.T) {
	spellings := []struct {
		name    string
		values  func(i int) []string
		refused bool
	}{
		{"x<i>, victim", func(i int) []string { return []string{fmt.Sprintf("x%d", i), "victim"} }, true},
		{"(empty), victim", func(int) []string { return []string{"", "victim"} }, true},
		{"victim, x<i>", func(i int) []string { return []string{"victim", fmt.Sprintf("x%d", i)} }, true},
		{"victim, (blank)", func(int) []string { return []string{"victim", " "} }, true},
		{"victim, victim", func(int) []string { return []string{"victim", " victim"} }, false},
	}
	for _, sp := range spellings {
		for _, failOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failopen=%v", sp.name, failOpen), func(t *testing.T) {
				svc, client := serveLogin(t, failOpen)
				statuses := map[codes.Code]int{}
				for i := range guesses {
					var md []string
					for _, v := range sp.values(i) {
						md = append(md, "x-user", v)
					}
					_, err := client.EmptyCall(metadata.AppendToOutgoingContext(ctxTimeout(t), md...), &testpb.Empty{})
					statuses[status.Code(err)]++
				}
				for i, r := range userReaders {
					if n := svc.acted[i].Load(); n > guessLimit || sp.refused && n > 0 {
						t.Errorf("a handler reading the %s value acted on %d guesses against the victim (statuses %v)", r.name, n, statuses)
					}
				}
				if sp.refused && statuses[codes.InvalidArgument] != guesses {
					t.Errorf("statuses %v; want every guess InvalidArgument", statuses)
				}
			})
		}
	}
}

// serveLogin serves loginService on a real gRPC server, limited to
// guessLimit guesses per user (the x-user metadata) then 100 per IP.
func serveLogin(t *testing.T, failOpen bool) (*loginService, testpb.TestServiceClient) {
	t.Helper()
	clk := newClock()
	ip := must(grpclimit.KeyByIP())
	sel := must(floodgate.NewSelectorFor(
		grpclimit.Policy{Name: "user", Limiter: bucket(t, floodgate.Rate{Limit: guessLimit, Period: time.Hour}, clk.option()), Key: must(grpclimit.KeyByMetadata("x-user"))},
		grpclimit.Policy{Name: "ip", Limiter: bucket(t, floodgate.Rate{Limit: 100, Period: time.Hour}, clk.option()), Key: ip},
	))
	var opts []grpclimit.Option
	if failOpen {
		opts = append(opts, grpclimit.WithFailOpen())
	}
	lim := must(grpclimit.NewPolicy(sel, opts...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	svc := &loginService{}
	testpb.RegisterTestServiceServer(srv, svc)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	s := &server{addr: ln.Addr().String()}
	return svc, testpb.NewTestServiceClient(s.dial(t))
}
