package benchmarks

import (
	"net"
	"net/http"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"
)

// baseline is the limiter a Go developer writes by hand when no library is
// wanted: one golang.org/x/time/rate.Limiter per key, kept in a bounded
// LRU behind one mutex. It is what floodgate has to beat to be worth a
// dependency.
type baseline struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[string, *rate.Limiter]
	limit rate.Limit
	burst int
}

func newBaseline(perSecond float64, burst, maxKeys int) (*baseline, error) {
	lru, err := simplelru.NewLRU[string, *rate.Limiter](maxKeys, nil)
	if err != nil {
		return nil, err
	}
	return &baseline{lru: lru, limit: rate.Limit(perSecond), burst: burst}, nil
}

// allow takes one token from key's limiter, creating it on first sight.
// The limiter has its own lock, so the map lock is not held while it
// decides.
func (b *baseline) allow(key string) bool {
	b.mu.Lock()
	lim, ok := b.lru.Get(key)
	if !ok {
		lim = rate.NewLimiter(b.limit, b.burst)
		b.lru.Add(key, lim)
	}
	b.mu.Unlock()
	return lim.Allow()
}

// middleware limits by the TCP peer's address and answers 429 when denied.
func (b *baseline) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		if !b.allow(host) {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}
