package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Response is how a call ended, for the cost function of WithCostAfter.
type Response struct {
	// FullMethod is the call's method.
	FullMethod string
	// Err is the handler's error (nil on success; status.Code reads its
	// code).
	Err error
	// Header and Trailer are the metadata the handler set or sent
	// (grpc.SetHeader, SendHeader, SetTrailer; a stream's own methods),
	// merged, the limit's own quota values aside.
	Header, Trailer metadata.MD
	// Reported is the cost the handler reported with
	// floodgate.ReportCost, or -1 if it reported none.
	Reported int
}

// WithCostAfter charges each call the cost known only once it has ended
// (the tokens a model spent, the rows a query returned), as
// floodgate.WithCostAfter does for HTTP: the call is admitted at its
// estimate (WithCost, default 1), and charged, when its handler returns,
// the cost cost returns when it returns true; else the cost the handler
// reported with floodgate.ReportCost(ctx, n); else the estimate. The key
// may go into debt; its next calls are denied until it is paid, with a
// RetryInfo that says when. Over-spending is bounded by the calls in
// flight (see floodgate.WithCostAfter). CostReported and CostTrailer are
// ready-made cost functions; a stream is charged when its handler
// returns. Every policy's limiter must implement floodgate.Charger and
// floodgate.Refunder.
func WithCostAfter(cost func(Response) (int, bool)) Option {
	return func(c *config) error {
		if cost == nil {
			return fmt.Errorf("%w: WithCostAfter: nil cost function (CostReported takes the handler's ReportCost)", floodgate.ErrInvalidOption)
		}
		c.cost = cost
		c.gate = append(c.gate, floodgate.WithSettledCost())
		return c.once("WithCostAfter")
	}
}

// CostReported is the cost function of WithCostAfter that charges what
// the handler reported with floodgate.ReportCost, and the estimate if it
// reported nothing.
func CostReported(resp Response) (int, bool) {
	return resp.Reported, resp.Reported >= 0
}

// CostTrailer returns a cost function for WithCostAfter that charges the
// value of the trailer key (or, failing that, of the header key) the
// handler set: a non-negative integer, as a backend reports what a call
// consumed. A missing or malformed value charges what the handler
// reported with floodgate.ReportCost, or else the estimate. The metadata
// reaches the client as it is. key must not be empty; the error wraps
// floodgate.ErrInvalidOption otherwise.
func CostTrailer(key string) (func(Response) (int, bool), error) {
	if key == "" {
		return nil, fmt.Errorf("%w: CostTrailer: empty metadata key", floodgate.ErrInvalidOption)
	}
	key = strings.ToLower(key)
	return func(resp Response) (int, bool) {
		for _, md := range []metadata.MD{resp.Trailer, resp.Header} {
			if v := md.Get(key); len(v) > 0 {
				if n, err := strconv.Atoi(v[len(v)-1]); err == nil && n >= 0 {
					return n, true
				}
			}
		}
		return CostReported(resp)
	}, nil
}

// sentMD records the metadata a handler sends, for the cost function.
type sentMD struct {
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (s *sentMD) add(to *metadata.MD, md metadata.MD) {
	s.mu.Lock()
	*to = metadata.Join(*to, md)
	s.mu.Unlock()
}

func (s *sentMD) get() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header, s.trailer
}

// recordingTransport is a unary call's grpc.ServerTransportStream that
// records what the handler sends through grpc.SetHeader, SendHeader and
// SetTrailer.
type recordingTransport struct {
	grpc.ServerTransportStream
	sent *sentMD
}

func (t *recordingTransport) SetHeader(md metadata.MD) error {
	t.sent.add(&t.sent.header, md)
	return t.ServerTransportStream.SetHeader(md)
}

func (t *recordingTransport) SendHeader(md metadata.MD) error {
	t.sent.add(&t.sent.header, md)
	return t.ServerTransportStream.SendHeader(md)
}

func (t *recordingTransport) SetTrailer(md metadata.MD) error {
	t.sent.add(&t.sent.trailer, md)
	return t.ServerTransportStream.SetTrailer(md)
}

// recordingStream is a stream whose context carries the call's meter,
// recording the metadata its handler sends.
type recordingStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent *sentMD
}

func (s *recordingStream) Context() context.Context { return s.ctx }

func (s *recordingStream) SetHeader(md metadata.MD) error {
	s.sent.add(&s.sent.header, md)
	return s.ServerStream.SetHeader(md)
}

func (s *recordingStream) SendHeader(md metadata.MD) error {
	s.sent.add(&s.sent.header, md)
	return s.ServerStream.SendHeader(md)
}

func (s *recordingStream) SetTrailer(md metadata.MD) {
	s.sent.add(&s.sent.trailer, md)
	s.ServerStream.SetTrailer(md)
}
