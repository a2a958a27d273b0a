package grpclimit

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc/metadata"
)

// mdSlots is the size of a limit's table of quota metadata maps: as many
// as floodgate keeps RateLimit values per policy.
const (
	mdBits  = 6
	mdSlots = 1 << mdBits
)

// mdCache holds the metadata maps of recently sent quota values, so that
// an admitted call sends the map an earlier call with the same values
// made, instead of making its own (a map is two allocations and 400
// bytes, more than the rest of the interceptor).
//
// floodgate formats each quota value once and hands out the same string
// until the value changes (Quota), so the addresses of a call's values
// say which map is theirs. The maps are shared between calls and
// goroutines, and never written once published: they only go to
// SendHeader and SetHeader, and grpc-go's transport reads the map it is
// given (SendHeader) or copies it (SetHeader, SetTrailer), but never
// writes into it. A denial's metadata, which adds keys, is never cached.
//
// A mdCache is safe for concurrent use; a lost race only makes a map
// twice.
type mdCache struct {
	seed  maphash.Seed
	slots [mdSlots]atomic.Pointer[mdEntry]
}

// quotaValues identifies the quota values of a call by the address of
// each one formatted (nil when it is not sent), in the order of quotaMD.
type quotaValues [5]*string

type mdEntry struct {
	values quotaValues
	md     metadata.MD
}

func newMDCache() *mdCache { return &mdCache{seed: maphash.MakeSeed()} }

// get returns the quota metadata of q, shared with the other calls that
// had the same values; nil when there are none.
func (c *mdCache) get(q *floodgate.Quota) metadata.MD {
	var values quotaValues
	var h uint64
	for i, v := range [...][]string{q.RateLimitPolicy(), q.RateLimit(), q.Limit(), q.Remaining(), q.Reset()} {
		if v != nil {
			values[i] = &v[0]
			h = h*31 + maphash.String(c.seed, v[0])
		}
	}
	if values == (quotaValues{}) {
		return nil
	}
	slot := &c.slots[h>>(64-mdBits)]
	if e := slot.Load(); e != nil && e.values == values {
		return e.md
	}
	e := &mdEntry{values: values, md: quotaMD(q, 0)}
	slot.Store(e)
	return e.md
}
