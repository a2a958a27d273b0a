// Package goredisstore runs the redisstore limiters on a go-redis v9
// client: any redis.UniversalClient (Client, ClusterClient, Ring, or a
// failover client for Sentinel). Importing it links go-redis and not
// rueidis.
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  "localhost:6379",
//		ContextTimeoutEnabled: true, // let redisstore's per-decision timeout reach the socket
//	})
//	lim, err := redisstore.NewTokenBucket(goredisstore.New(rdb), floodgate.PerMinute(10))
//
// # Retries
//
// go-redis retries a command that failed on the network up to MaxRetries
// times (3 by default), including after a read timeout or a connection
// reset, when the server may already have run it. For a rate-limit script
// that would charge a client twice for one request. This adapter therefore
// marks every script call as not retryable (go-redis's per-command NoRetry),
// whatever MaxRetries says: a failed decision is reported as an error, and
// the limiter's error policy or fallback answers it. The client's other
// commands keep their retries. Cluster redirections (MOVED, ASK) are still
// followed: the script did not run on the node that redirected.
//
// # Timeouts
//
// go-redis honours a context deadline on the socket only with
// ContextTimeoutEnabled; without it, redisstore's per-decision timeout
// (redisstore.WithTimeout) is bounded by the client's ReadTimeout and
// WriteTimeout instead (3 s by default), so a stalled server stalls the
// requests it guards for that long. Set ContextTimeoutEnabled.
package goredisstore

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// Scripter runs scripts on a go-redis client. It implements
// redisstore.Scripter.
type Scripter struct {
	c redis.UniversalClient
}

var _ redisstore.Scripter = (*Scripter)(nil)

// New returns a Scripter running scripts on c. The client stays the
// caller's to configure and close.
func New(c redis.UniversalClient) *Scripter { return &Scripter{c: c} }

// EvalSha runs the script cached under sha1; a NOSCRIPT reply is returned
// wrapping redisstore.ErrNoScript.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error) {
	r, err := s.run(ctx, "evalsha", sha1, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = fmt.Errorf("%w: %w", redisstore.ErrNoScript, err)
	}
	return r, err
}

// Eval runs the script source.
func (s *Scripter) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return s.run(ctx, "eval", script, keys, args)
}

// noRetry is a script command that go-redis must not retry: a retry after
// the server ran it would run it twice.
type noRetry struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (noRetry) NoRetry() bool { return true }

func (s *Scripter) run(ctx context.Context, name, payload string, keys, args []string) ([]int64, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // route by the first key's slot
	}
	_ = s.c.Process(ctx, noRetry{cmd})
	return cmd.Int64Slice()
}
