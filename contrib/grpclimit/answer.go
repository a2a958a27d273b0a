package grpclimit

import (
	"context"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Metadata keys of the quota values: floodgate's HTTP header names in
// lower case, as gRPC requires, and gRFC A6's server pushback.
const (
	mdRateLimitPolicy = "ratelimit-policy"
	mdRateLimit       = "ratelimit"
	mdLimit           = "x-ratelimit-limit"
	mdRemaining       = "x-ratelimit-remaining"
	mdReset           = "x-ratelimit-reset"
	mdRetryAfter      = "retry-after"
	// mdPushback is gRFC A6's server pushback: the milliseconds after
	// which a client's retry policy retries, or a negative value for
	// "do not retry". grpc-go honours it only on a Trailers-Only
	// response, and reads it from the trailers.
	mdPushback = "grpc-retry-pushback-ms"
)

// trailerSetter sets the trailers of a refused call.
type trailerSetter func(metadata.MD)

// quotaMD returns the quota values of q as metadata, with room for extra
// more keys; nil when there are none.
func quotaMD(q *floodgate.Quota, extra int) metadata.MD {
	values := [...]struct {
		key string
		v   []string
	}{
		{mdRateLimitPolicy, q.RateLimitPolicy()}, {mdRateLimit, q.RateLimit()},
		{mdLimit, q.Limit()}, {mdRemaining, q.Remaining()}, {mdReset, q.Reset()},
	}
	var md metadata.MD
	for _, kv := range values {
		if kv.v == nil {
			continue
		}
		if md == nil {
			md = make(metadata.MD, 2+extra)
		}
		// The values are shared between calls: gRPC reads or copies
		// them and never writes into them.
		md[kv.key] = kv.v
	}
	return md
}

// answerQuota sends the quota values of an admitted unary call once its
// handler has returned (WithQuotaOnAllowed; md is nil otherwise): as
// response headers when it succeeded, in the trailers when it failed, so
// that a failure the handler returns stays Trailers-Only, retryable by a
// client's retry policy as a denial is.
//
// The headers are sent, not set, because that costs four allocations
// less on two keys: SetHeader merges the values into a new map
// (metadata.Join), SendHeader on headers not yet set hands the transport
// md as it is. grpc-go would send them right after anyway, with the
// response. When the headers are gone already (the handler sent them,
// or another limit inside this one did), the quota goes in the
// trailers.
func answerQuota(stream grpc.ServerTransportStream, md metadata.MD, failed bool) {
	if md == nil || stream == nil {
		return
	}
	if failed || stream.SendHeader(md) != nil {
		_ = stream.SetTrailer(md) // fails only once the call is over
	}
}

// refuse answers a blocked call: its status, and, for a denial, the quota
// metadata and the pushback, all in the trailers. Nothing is sent as
// headers, so that the answer is Trailers-Only, the one form of failure
// a client's retry policy retries.
func refuse(ctx context.Context, setTrailer trailerSetter, out *floodgate.Outcome) error {
	switch out.Kind {
	case floodgate.OutcomeDenied:
		return deny(setTrailer, out)
	case floodgate.OutcomeHungUp:
		return status.FromContextError(ctx.Err()).Err()
	case floodgate.OutcomeClientError:
		return status.Error(codes.InvalidArgument, "rate limit: the call carries no usable key")
	case floodgate.OutcomeMisconfigured:
		return status.Error(codes.Internal, "rate limit: misconfigured")
	default: // OutcomeFailed failing closed, OutcomeKeyFailed
		return status.Error(codes.Unavailable, "rate limiter unavailable; try again later")
	}
}

// deny answers a denial: ResourceExhausted with a RetryInfo holding the
// exact wait, and in the trailers the quota values, retry-after and
// grpc-retry-pushback-ms, the wait in milliseconds rounded up. A call
// that costs more than the limit can ever hold gets a pushback of -1,
// which tells a client's retry policy not to retry, and no RetryInfo. A
// denial of a service-wide capacity (Decision.Overloaded) is Unavailable
// instead, with the same wait: the service is busy, the caller is not
// over its limit.
func deny(setTrailer trailerSetter, out *floodgate.Outcome) error {
	wait := out.Decision.RetryAfter
	md := quotaMD(&out.Quota, 2)
	if md == nil {
		md = make(metadata.MD, 2)
	}
	if ra := out.Quota.RetryAfter(); ra != nil {
		md[mdRetryAfter] = ra
	}
	if wait <= 0 {
		md[mdPushback] = []string{"-1"}
	} else {
		md[mdPushback] = []string{strconv.FormatInt(pushbackMillis(wait), 10)}
	}
	setTrailer(md)
	if wait <= 0 {
		return status.Error(codes.ResourceExhausted, "rate limit exceeded: the call costs more than the limit allows and cannot succeed")
	}
	st := status.New(codes.ResourceExhausted, "rate limit exceeded; retry after "+wait.Round(time.Millisecond).String())
	if out.Decision.Overloaded {
		st = status.New(codes.Unavailable, "service at capacity; retry after "+wait.Round(time.Millisecond).String())
	}
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// pushbackMillis is a wait in whole milliseconds, rounded up, so that a
// client retrying after it finds the quota back; at least 1.
func pushbackMillis(wait time.Duration) int64 {
	ms := int64(wait / time.Millisecond)
	if wait%time.Millisecond != 0 {
		ms++
	}
	return max(ms, 1)
}
