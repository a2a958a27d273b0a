package pace

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Window paces the lines about one subject: none before until, and a
// count of those held back. The zero Window lets the first line through.
// A Window is not safe for concurrent use: its owner locks around Admit.
type Window struct {
	until      time.Time
	suppressed uint64
}

// Admit reports whether a line may be written at now, and how many were
// suppressed since the last one; it then holds lines back for period.
func (w *Window) Admit(now time.Time, period time.Duration) (bool, uint64) {
	if now.Before(w.until) {
		w.suppressed++
		return false, 0
	}
	n := w.suppressed
	w.until, w.suppressed = now.Add(period), 0
	return true, n
}

// MinPeriod is the shortest time between two lines for one key of Keys.
const MinPeriod = time.Second

// Keys remembers, for a bounded number of keys, when each may be logged
// again. It is safe for concurrent use.
type Keys struct {
	mu   sync.Mutex
	size int
	keys *simplelru.LRU[string, *Window]
	// other counts lines neither written nor counted under their key:
	// those of new keys while the table was full of keys still in their
	// windows, and the suppressed counts of expired keys dropped to make
	// room.
	other uint64
}

// NewKeys returns a table of at most size keys; size must be positive.
func NewKeys(size int) *Keys {
	lru, _ := simplelru.NewLRU[string, *Window](max(size, 1), nil) // positive: cannot fail
	return &Keys{size: max(size, 1), keys: lru}
}

// Admit reports whether a line about key at now may be written, with the
// lines suppressed for key since its last one and the lines of other keys
// dropped meanwhile; a key logged is then quiet for period (at least
// MinPeriod).
func (l *Keys) Admit(key string, now time.Time, period time.Duration) (ok bool, suppressed, other uint64) {
	period = max(period, MinPeriod)
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, found := l.keys.Get(key); found {
		if ok, suppressed = w.Admit(now, period); ok {
			other, l.other = l.other, 0
		}
		return ok, suppressed, other
	}
	if l.keys.Len() >= l.size {
		_, oldest, _ := l.keys.GetOldest()
		if now.Before(oldest.until) {
			// Every remembered key is within its window: the table is as
			// big as the log may grow in one period. Count, do not log.
			l.other++
			return false, 0, 0
		}
		l.other += oldest.suppressed
		l.keys.RemoveOldest()
	}
	// Clone: the key may point into request memory (a header value).
	l.keys.Add(strings.Clone(key), &Window{until: now.Add(period)})
	other, l.other = l.other, 0
	return true, 0, other
}
