package goredisstore_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisAddr is the server the examples use (an example cannot skip, so
// TestMain finds one first).
var redisAddr string

func TestMain(m *testing.M) {
	redistest.MainWithServer(m, func(addr string) { redisAddr = addr })
}

// TestScriptIsNotRetried: a reply lost after the server ran the script
// must not make go-redis run it again (MaxRetries is left at its default
// of 3).
func TestScriptIsNotRetried(t *testing.T) {
	redistest.CheckScriptNotRetried(t, func(t *testing.T, addr string) redisstore.Scripter {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		return goredisstore.New(rdb)
	})
}
