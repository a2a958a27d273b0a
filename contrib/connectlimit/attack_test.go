package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Guesses against a victim's password on a login limited per user, then
// per IP (leniently, for users behind one NAT).
const (
	guessLimit     = 3
	guesses        = 20
	loginProcedure = "/test.v1.TestService/Login"
)

// userReaders are the ways a handler reads the user from the lines of a
// header.
var userReaders = []struct {
	name string
	read func([]string) string
}{
	{"Header.Get", func(vs []string) string { return nth(vs, 0) }},
	{"last line", func(vs []string) string { return nth(vs, len(vs)-1) }},
	{"first non-empty line", func(vs []string) string { return nonEmpty(vs, false) }},
	{"last non-empty line", func(vs []string) string { return nonEmpty(vs, true) }},
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

// TestRepeatedHeaderAttacks: issue 18, a header given on several lines.
// connectlimit.KeyByHeader keyed by the first line only: "X-User: x<i>",
// "X-User: victim" was counted under x<i>, and an empty first line fell
// back to the IP policy, while a handler reading the last line acted on
// victim: 20 of 20 guesses, from a real connect-go client, on a limit of
// 3. Lines that differ are now ErrAmbiguousKey, CodeInvalidArgument under
// every error policy, on each of connect's three protocols; a value
// repeated alike is counted.
func TestRepeatedHeaderAttacks(t *testing.T) {
	spellings := []struct {
		name    string
		lines   func(i int) []string
		refused bool
	}{
		{"x<i>, victim", func(i int) []string { return []string{fmt.Sprintf("x%d", i), "victim"} }, true},
		{"(empty), victim", func(int) []string { return []string{"", "victim"} }, true},
		{"victim, x<i>", func(i int) []string { return []string{"victim", fmt.Sprintf("x%d", i)} }, true},
		{"victim, victim", func(int) []string { return []string{"victim", " victim"} }, false},
	}
	for _, p := range protocols {
		for _, sp := range spellings {
			for _, failOpen := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/failopen=%v", p.name, sp.name, failOpen), func(t *testing.T) {
					acted, client := serveLogin(t, failOpen, p.opts)
					statuses := map[connect.Code]int{}
					for i := range guesses {
						req := connect.NewRequest(wrapperspb.String("guess"))
						for _, l := range sp.lines(i) {
							req.Header().Add("X-User", l)
						}
						_, err := client.CallUnary(ctxTimeout(t), req)
						statuses[connect.CodeOf(err)]++
					}
					for i, r := range userReaders {
						if n := acted[i].Load(); n > guessLimit || sp.refused && n > 0 {
							t.Errorf("a handler reading the %s acted on %d guesses against the victim (statuses %v)", r.name, n, statuses)
						}
					}
					if sp.refused && statuses[connect.CodeInvalidArgument] != guesses {
						t.Errorf("statuses %v; want every guess CodeInvalidArgument", statuses)
					}
				})
			}
		}
	}
}

// serveLogin serves a login on a real HTTP/2 server, limited to
// guessLimit guesses per user (the X-User header) then 100 per IP. Its
// handler answers every guess "wrong password", counting for each of
// userReaders the guesses it would have acted on against "victim".
func serveLogin(t *testing.T, failOpen bool, opts []connect.ClientOption) (*[4]atomic.Int32, *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue]) {
	t.Helper()
	clk := newClock()
	sel := must(floodgate.NewSelectorFor(
		connectlimit.Policy{Name: "user", Limiter: bucket(t, floodgate.Rate{Limit: guessLimit, Period: time.Hour}, clk.option()), Key: must(connectlimit.KeyByHeader("X-User"))},
		connectlimit.Policy{Name: "ip", Limiter: bucket(t, floodgate.Rate{Limit: 100, Period: time.Hour}, clk.option()), Key: must(connectlimit.KeyByIP())},
	))
	var limOpts []connectlimit.Option
	if failOpen {
		limOpts = append(limOpts, connectlimit.WithFailOpen())
	}
	lim := must(connectlimit.NewPolicy(sel, limOpts...))
	acted := new([4]atomic.Int32)
	login := func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		lines := req.Header().Values("X-User")
		for i, r := range userReaders {
			if r.read(lines) == "victim" {
				acted[i].Add(1)
			}
		}
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("wrong password"))
	}
	mux := http.NewServeMux()
	mux.Handle(loginProcedure, connect.NewUnaryHandler(loginProcedure, login, connect.WithInterceptors(lim)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return acted, connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+loginProcedure, opts...)
}
