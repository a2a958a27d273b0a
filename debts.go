package floodgate

// debts is a shard's fixed-size memory of the keys it had to drop while
// they still held state (live evictions), so that an attacker cannot buy
// a reset by spraying keys until the key it wants freed is pushed out.
//
// It keeps, for each such key, only the time at which its state would
// have become fresh (its freshAt), tagged with a 16-bit fingerprint of the
// key's hash, in buckets of debtWays entries. A key that is not in the
// store looks at its bucket: the latest time among the entries carrying
// its fingerprint and the bucket's overflow bound is an upper bound of
// what it owed, and the key starts from the state of a client that is
// fully limited until then (each algorithm's restore), never from fresh.
//
// When a bucket's entries all hold debts still running, the smallest of
// them (or the newcomer, if smaller) is merged into the overflow bound,
// which from then on applies to every key of the bucket: memory stays
// fixed, and the cost of remembering more debts than there is room for is
// paid by the keys that hash to that bucket and had no debt of their own
// (false positives), never by letting a debt go. Entries whose time has
// passed are free again, so the memory heals as the debts run out.
type debts struct {
	buckets []debtBucket
	// until is the latest time recorded: from then on every entry has run
	// out, and a lookup can be skipped. It keeps the miss path of a store
	// that never evicted live free of the bucket's cache line.
	until int64
	// merged counts debts that lost their own entry to the overflow bound.
	merged uint64
}

// debtWays is the number of entries in a bucket: four times and a
// fingerprint fill one 48-byte bucket, and four candidates keep the
// overflow rare until the memory is nearly full (with as many entries as
// debts, a bucket overflows with a probability of about 37 %, with twice
// as many about 5 %).
const debtWays = 4

// debtEntriesPerKey sizes the memory: entries per key the store can track.
// Two keep a 2 × MaxKeys spray of live keys mostly within their own
// entries (see debtWays) for 24 bytes per key of MaxKeys.
const debtEntriesPerKey = 2

type debtBucket struct {
	at   [debtWays]int64 // freshAt of the debt; <= now: free
	fp   [debtWays]uint16
	over int64 // the bound of the debts merged out of their entries
}

func newDebts(keys int) *debts {
	n := (keys*debtEntriesPerKey + debtWays - 1) / debtWays
	return &debts{buckets: make([]debtBucket, n)}
}

// bucket returns h's bucket and fingerprint. The bits used are disjoint
// from the low bits that pick the shard.
func (d *debts) bucket(h uint64) (*debtBucket, uint16) {
	i := (h >> 16 & 0xffffffff) * uint64(len(d.buckets)) >> 32
	return &d.buckets[i], uint16(h >> 48)
}

// lookup returns an upper bound of the freshAt of h's debt: a time at or
// before now means h owes nothing.
func (d *debts) lookup(h uint64, now int64) int64 {
	if now >= d.until {
		return now
	}
	b, fp := d.bucket(h)
	at := b.over
	for i := range b.at {
		if b.fp[i] == fp && b.at[i] > at {
			at = b.at[i]
		}
	}
	return at
}

// record remembers that h owes until at (> now).
func (d *debts) record(h uint64, at, now int64) {
	d.until = max(d.until, at)
	b, fp := d.bucket(h)
	free, low := -1, -1
	for i := range b.at {
		switch {
		case b.at[i] <= now:
			if free < 0 {
				free = i
			}
		case b.fp[i] == fp:
			// The same key, or one sharing its fingerprint: one bound
			// serves both.
			b.at[i] = max(b.at[i], at)
			return
		case low < 0 || b.at[i] < b.at[low]:
			low = i
		}
	}
	switch {
	case free >= 0:
		b.at[free], b.fp[free] = at, fp
		return
	case at <= b.at[low]:
		b.over = max(b.over, at)
	default:
		b.over = max(b.over, b.at[low])
		b.at[low], b.fp[low] = at, fp
	}
	d.merged++
}

// forget clears h's own entries, for Reset. It reports whether h still
// owes through the overflow bound, which it cannot clear.
func (d *debts) forget(h uint64, now int64) (owes bool) {
	if now >= d.until {
		return false
	}
	b, fp := d.bucket(h)
	for i := range b.at {
		if b.fp[i] == fp {
			b.at[i] = 0
		}
	}
	return b.over > now
}
