package connectlimit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// headerPushback is gRFC A6's server pushback, sent on a denial to gRPC
// and gRPC-Web clients: the milliseconds after which a retry policy
// retries, or -1 for "do not retry".
const headerPushback = "Grpc-Retry-Pushback-Ms"

// setErrorQuota adds the quota values of an admitted call to the error
// its handler returned, as the error's metadata, when it is a
// *connect.Error (another error has no metadata to carry them).
func setErrorQuota(err error, q *floodgate.Quota) {
	var ce *connect.Error
	if errors.As(err, &ce) {
		q.SetHeaders(ce.Meta())
	}
}

// refuse answers a blocked call with a connect error.
func refuse(ctx context.Context, protocol string, out *floodgate.Outcome) error {
	switch out.Kind {
	case floodgate.OutcomeDenied:
		return deny(protocol, out)
	case floodgate.OutcomeHungUp:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	case floodgate.OutcomeClientError:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("rate limit: the call carries no usable key"))
	case floodgate.OutcomeMisconfigured:
		return connect.NewError(connect.CodeInternal, errors.New("rate limit: misconfigured"))
	default: // OutcomeFailed failing closed, OutcomeKeyFailed
		return connect.NewError(connect.CodeUnavailable, errors.New("rate limiter unavailable; try again later"))
	}
}

// deny answers a denial: CodeResourceExhausted with a RetryInfo detail
// holding the exact wait, and the quota headers and Retry-After as the
// error's metadata (response headers on the Connect protocol, trailers on
// gRPC and gRPC-Web), with grpc-retry-pushback-ms for the gRPC
// protocols. A call that costs more than the limit can ever hold gets no
// RetryInfo, and a pushback of -1. A denial of a service-wide capacity
// (Decision.Overloaded) is CodeUnavailable, with the same wait.
func deny(protocol string, out *floodgate.Outcome) error {
	wait := out.Decision.RetryAfter
	var ce *connect.Error
	if wait <= 0 {
		ce = connect.NewError(connect.CodeResourceExhausted, errors.New("rate limit exceeded: the call costs more than the limit allows and cannot succeed"))
	} else {
		code, why := connect.CodeResourceExhausted, "rate limit exceeded"
		if out.Decision.Overloaded { // a service-wide capacity: the service is busy
			code, why = connect.CodeUnavailable, "service at capacity"
		}
		ce = connect.NewError(code, errors.New(why+"; retry after "+wait.Round(time.Millisecond).String()))
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
			ce.AddDetail(d)
		}
	}
	out.Quota.SetHeaders(ce.Meta())
	if protocol == connect.ProtocolGRPC || protocol == connect.ProtocolGRPCWeb {
		ce.Meta()[headerPushback] = []string{pushback(wait)}
	}
	return ce
}

// pushback is a wait in whole milliseconds, rounded up and at least 1,
// or -1 when no wait helps.
func pushback(wait time.Duration) string {
	if wait <= 0 {
		return "-1"
	}
	ms := int64(wait / time.Millisecond)
	if wait%time.Millisecond != 0 {
		ms++
	}
	return strconv.FormatInt(max(ms, 1), 10)
}
