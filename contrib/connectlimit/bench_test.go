package connectlimit_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkUnaryServer measures an allowed unary call end to end, a real
// connect-go client calling a real HTTP/2 server (TLS, on loopback) on
// the Connect and the gRPC protocols: a bare handler, one with an
// interceptor that only calls the handler, and the same with the limit,
// with and without the quota headers, in the same run.
func BenchmarkUnaryServer(b *testing.B) {
	for _, p := range protocols[:2] {
		for _, c := range []struct {
			name string
			ic   func(b *testing.B) []connect.HandlerOption
		}{
			{"bare", func(*testing.B) []connect.HandlerOption { return nil }},
			{"noop-interceptor", func(*testing.B) []connect.HandlerOption {
				return []connect.HandlerOption{connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc { return next }))}
			}},
			{"limited", func(b *testing.B) []connect.HandlerOption { return limitedBy(b) }},
			{"limited-no-quota-headers", func(b *testing.B) []connect.HandlerOption {
				return limitedBy(b, connectlimit.WithHeaders(floodgate.HeadersNone))
			}},
		} {
			b.Run(p.name+"/"+c.name, func(b *testing.B) {
				srv := benchServer(b, c.ic(b))
				client := echoClient(srv, p.opts)
				ctx := context.Background()
				req := connect.NewRequest(wrapperspb.String("hi"))
				if _, err := client.CallUnary(ctx, req); err != nil {
					b.Fatal(err) // connects
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := client.CallUnary(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func limitedBy(b *testing.B, opts ...connectlimit.Option) []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithInterceptors(must(connectlimit.New(bucket(b, floodgate.PerSecond(1<<24)), opts...)))}
}

func benchServer(b *testing.B, opts []connect.HandlerOption) *httptest.Server {
	svc := &service{}
	mux := http.NewServeMux()
	mux.Handle(echoProcedure, connect.NewUnaryHandler(echoProcedure, svc.echo, opts...))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	b.Cleanup(srv.Close)
	return srv
}
