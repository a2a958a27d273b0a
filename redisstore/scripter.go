package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/floodgate-go/floodgate/redisstore/internal/scriptbatch"
)

// Scripter is all the limiters need from a Redis client: running a Lua
// script, by its SHA1 digest or by its source, and reading back the array
// of integers it replies with. The adapter packages goredisstore (go-redis
// v9) and rueidisstore (rueidis) implement it; because each lives in its
// own package, a program links only the client it uses.
//
// Keys are passed separately from arguments so that a cluster-aware client
// routes the call to the node that owns their slot (every call of this
// package passes keys of a single slot).
//
// An error wrapping ErrNotReplicated comes with the script's reply: the
// limiter reads the decision, and keeps the error only for an allowed one.
// Without the reply the error stands for the decision, whatever it was.
//
// A Scripter that also has an Err() error method (both adapters do: it
// reports invalid options) and returns an error from it is refused by the
// limiter constructors, with that error.
type Scripter interface {
	// EvalSha runs the cached script with the given SHA1 (EVALSHA). When
	// the server does not hold the script it must return an error that
	// wraps ErrNoScript, so that the limiter loads it with Eval.
	EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error)
	// Eval runs the script source (EVAL), which also caches it on the
	// server for later EvalSha calls.
	Eval(ctx context.Context, script string, keys, args []string) ([]int64, error)
}

// ErrNoScript is wrapped by a Scripter's EvalSha error when the server
// answered NOSCRIPT: it does not hold the script (it restarted, failed over
// to a replica that never saw it, or ran SCRIPT FLUSH).
var ErrNoScript = errors.New("redisstore: NOSCRIPT: script not cached on the server")

// ErrRedis is wrapped, together with the cause, by every error of a
// limiter that comes from the Redis round trip: the server could not be
// reached, did not answer in time, or answered with an error.
var ErrRedis = errors.New("redisstore: redis")

// ErrNotReplicated is wrapped by a Scripter's error when the writes of a
// script were not acknowledged by as many replicas as the adapter was
// told to wait for (goredisstore.WithWaitReplicas,
// rueidisstore.WithWaitReplicas). The script ran on the master; a failover
// before the replicas catch up could lose what it recorded.
//
// A limiter returns it (wrapped in ErrRedis, with a Decision that does not
// allow) only for a decision that Redis allowed and the master charged: a
// denial is returned as the denial it is, with no error, whatever the
// replication, so that no error policy and no fallback can turn it into a
// pass. The fallback (WithFallback) is not asked either: Redis answered.
// floodgate's middleware applies its error policy: fail-closed answers
// 503, fail-open runs the handler, which is sound here, since the request
// was counted on the master like any allowed one.
var ErrNotReplicated = errors.New("redisstore: writes not acknowledged by enough replicas")

// The scripts: one decision per algorithm, one refund per algorithm, and
// one to reset a key. Each decision is
// a single EVALSHA: one round trip, atomic on the server.
var (
	// prelude holds the helpers the decision and refund scripts share; it
	// is prepended to each of them, so each is still one EVAL.
	//go:embed scripts/prelude.lua
	prelude string
	//go:embed scripts/prelude_counter.lua
	preludeCounter string
	//go:embed scripts/prelude_log.lua
	preludeLog string
	//go:embed scripts/tokenbucket.lua
	tokenBucketSrc string
	//go:embed scripts/prelude_interval.lua
	preludeInterval string
	//go:embed scripts/tokenbucket_interval.lua
	intervalSrc string
	//go:embed scripts/tokenbucket_interval_refund.lua
	intervalRefundSrc string
	//go:embed scripts/slidinglog.lua
	slidingLogSrc string
	//go:embed scripts/slidingcounter.lua
	slidingCounterSrc string
	//go:embed scripts/reset.lua
	resetSrc string
	//go:embed scripts/tokenbucket_refund.lua
	tokenBucketRefundSrc string
	//go:embed scripts/slidinglog_refund.lua
	slidingLogRefundSrc string
	//go:embed scripts/slidingcounter_refund.lua
	slidingCounterRefundSrc string
	//go:embed scripts/prelude_rate.lua
	preludeRate string
	//go:embed scripts/rate_read.lua
	readRateSrc string
	//go:embed scripts/rate_write.lua
	writeRateSrc string

	//go:embed scripts/batch.lua
	batchSrc string

	// The decision scripts can also run as entries of a batch (see
	// newBatchedScript). The token bucket makes the rate helpers only on
	// its path that needs them (tokenbucket.lua, --@rate), not on a plain
	// decision's.
	tokenBucketScript    = newBatchedScript(prelude, strings.Replace(tokenBucketSrc, "--@rate\n", preludeRate, 1))
	intervalScript       = newBatchedScript(prelude+preludeRate+preludeInterval, intervalSrc)
	slidingLogScript     = newBatchedScript(prelude+preludeLog, slidingLogSrc)
	slidingCounterScript = newBatchedScript(prelude+preludeRate+preludeCounter, slidingCounterSrc)
	resetScript          = newScript(resetSrc)

	tokenBucketRefundScript    = newScript(prelude + preludeRate + tokenBucketRefundSrc)
	intervalRefundScript       = newScript(prelude + preludeRate + preludeInterval + intervalRefundSrc)
	slidingLogRefundScript     = newScript(prelude + preludeLog + slidingLogRefundSrc)
	slidingCounterRefundScript = newScript(prelude + preludeRate + preludeCounter + slidingCounterRefundSrc)
)

// script is a Lua source with its SHA1, computed once.
type script struct {
	src string
	sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// newBatchedScript returns the script of preludes and body, and
// registers its batch script (scripts/batch.lua around the same code), so
// that an adapter may send concurrent calls of it as the entries of one
// call (see internal/scriptbatch). The preludes start with prelude.lua,
// whose clock the batch reads once.
func newBatchedScript(preludes, body string) *script {
	s := newScript(preludes + body)
	src := strings.Replace(batchSrc, "--@preludes\n", preludes, 1)
	src = strings.Replace(src, "--@body\n", body, 1)
	b := newScript(src)
	scriptbatch.Register(s.sha, &scriptbatch.Script{Src: b.src, SHA: b.sha})
	return s
}

// run executes the script with EVALSHA and, if the server does not hold it,
// once more with EVAL, which caches it for next time. A NOSCRIPT reply
// means nothing ran, so the second attempt cannot double-charge.
func (s *script) run(ctx context.Context, c Scripter, keys, args []string) ([]int64, error) {
	r, err := c.EvalSha(ctx, s.sha, keys, args)
	if errors.Is(err, ErrNoScript) {
		r, err = c.Eval(ctx, s.src, keys, args)
	}
	return r, err
}
