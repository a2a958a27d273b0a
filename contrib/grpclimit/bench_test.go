package grpclimit_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// BenchmarkUnary measures what the interceptor adds to a unary call, over
// 10,000 peers, against a call of the handler alone in the same run.
func BenchmarkUnary(b *testing.B) {
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(1 << 20))
	if err != nil {
		b.Fatal(err)
	}
	ic, err := grpclimit.New(lim)
	if err != nil {
		b.Fatal(err)
	}
	ctxs := make([]context.Context, 10_000)
	for i := range ctxs {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 5000}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("user-agent", "bench/"+strconv.Itoa(i), "content-type", "application/grpc"))
		ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.Service/Method"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	unary := ic.Unary()
	b.Run("handler-alone", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := handler(ctxs[i%len(ctxs)], nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("interceptor", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := unary(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nopStream stands in for the server's transport stream, so that
// grpc.SetHeader succeeds as on a real server.
type nopStream struct{}

func (nopStream) Method() string               { return "/svc.Service/Method" }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }

// BenchmarkHTTPMiddlewareBaseline is the floodgate HTTP middleware on the
// same limiter and peers, for comparison with BenchmarkUnary in one run.
func BenchmarkHTTPMiddlewareBaseline(b *testing.B) {
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(1 << 20))
	if err != nil {
		b.Fatal(err)
	}
	mw, err := floodgate.NewMiddleware(lim)
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodPost, "/svc.Service/Method", nil)
		reqs[i].RemoteAddr = net.JoinHostPort(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String(), "5000")
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for i := range b.N {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%len(reqs)])
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
