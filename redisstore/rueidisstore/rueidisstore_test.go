package rueidisstore_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/rueidis"
)

// redisAddr is the server the examples use (an example cannot skip, so
// TestMain finds one first).
var redisAddr string

func TestMain(m *testing.M) {
	redistest.MainWithServer(m, func(addr string) { redisAddr = addr })
}

// TestScriptIsNotRetried: a reply lost after the server ran the script
// must not make rueidis run it again (it retries only read-only commands).
func TestScriptIsNotRetried(t *testing.T) {
	redistest.CheckScriptNotRetried(t, func(t *testing.T, addr string) redisstore.Scripter {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return rueidisstore.New(c)
	})
}
