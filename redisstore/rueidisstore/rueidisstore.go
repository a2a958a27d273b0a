// Package rueidisstore runs the redisstore limiters on a rueidis client
// (standalone, Sentinel or Cluster: rueidis detects which). Importing it
// links rueidis and not go-redis.
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	lim, err := redisstore.NewTokenBucket(rueidisstore.New(c), floodgate.PerMinute(10))
//
// rueidis pipelines concurrent calls on shared connections automatically,
// which is what makes it the faster client under many concurrent callers
// (see the benchmarks in the redisstore README). It honours context
// deadlines, so redisstore's per-decision timeout applies as it is, and it
// retries only read-only commands after a network error: a script that
// writes, as every redisstore script does, is never run twice for one
// decision.
package rueidisstore

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/redis/rueidis"
)

// Scripter runs scripts on a rueidis client. It implements
// redisstore.Scripter.
type Scripter struct {
	c rueidis.Client
}

var _ redisstore.Scripter = (*Scripter)(nil)

// New returns a Scripter running scripts on c. The client stays the
// caller's to configure and close.
func New(c rueidis.Client) *Scripter { return &Scripter{c: c} }

// EvalSha runs the script cached under sha1; a NOSCRIPT reply is returned
// wrapping redisstore.ErrNoScript.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error) {
	cmd := s.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	r, err := s.c.Do(ctx, cmd).AsIntSlice()
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		err = fmt.Errorf("%w: %w", redisstore.ErrNoScript, err)
	}
	return r, err
}

// Eval runs the script source.
func (s *Scripter) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	cmd := s.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return s.c.Do(ctx, cmd).AsIntSlice()
}
