package floodgate

import "math"

// debt is what a key's state owes, in the few numbers the debt memory
// keeps: at is a time (ns since the limiter's epoch) and amt a count of
// up to 26 bits, both meaning what the key's algorithm makes of them (see
// each algorithm's debt and restore; an algorithm may pack more of its
// state into them than a time and a count, as long as these rules hold).
// A state owes nothing once at has passed (see owes): at is no earlier
// than the first time at which the state equals a fresh one. And a
// shared debt, the elementwise maximum of several (see max), is restored
// to a state that allows no more, at any time, than the state restored
// from any debt no larger in both numbers, so that a bound merged from
// several keys' debts binds each of them.
type debt struct {
	at  int64
	amt uint32
	// shared marks a bound merged from several keys' debts (see debts),
	// which is restored by the rule above, never as one key's own debt.
	shared bool
}

// owes reports whether the debt still limits the key at now: at is the
// first time at which the key's state equals a fresh one.
func (v debt) owes(now int64) bool { return v.at > now }

// max returns the elementwise maximum of two debts, a shared debt: an
// upper bound of both (see debt).
func (v debt) max(w debt) debt {
	return debt{at: max(v.at, w.at), amt: max(v.amt, w.amt), shared: true}
}

// debts is a shard's fixed-size memory of the keys it had to drop while
// they still held state (live evictions), so that an attacker cannot buy
// a reset by spraying keys until the key it wants freed is pushed out,
// and so that an honest key pushed out by a spray comes back owing what
// it spent (exactly, or for a sliding log as closely as its debt can
// say: see SlidingLog's restore).
//
// It is a cuckoo table: each key has two buckets of debtWays entries,
// and an entry holds the key's debt exactly (a 64-bit time and a 26-bit
// amount) under a 38-bit fingerprint of the key's hash. A key's own entry
// is the whole truth about it. When both buckets are full, entries are
// moved to their other bucket to make room (at most maxKicks moves);
// only when that fails does a debt lose its own entry: by default it is
// merged into its bucket's shared bound (the entry with fingerprint 0,
// the elementwise maximum of the debts merged there), which from then on
// also binds the keys of that bucket that have no entry of their own —
// a stranger may wait, but no debt is forgotten. With WithForgetOverflow
// the debt that ends soonest is forgotten instead.
//
// Entries whose debt has run out are free again, so the memory heals as
// the debts end. An entry with the marker amount shields a key from the
// shared bounds of its buckets until every debt the memory held when it
// was written has ended (so also from those debts merged there later):
// it is written when the key is reset while the memory holds any running
// debt (Reset is durable), and when the key comes back owing nothing of
// its own, or less than a shared bound that binds its buckets. A shield
// is never dropped while a debt of its buckets can give way instead, and
// no debt is dropped to keep a shield (see overflow).
type debts struct {
	buckets []debtBucket
	// until is the latest time written: from then on every entry has run
	// out and a lookup can be skipped, which keeps the miss path of a
	// store that rarely evicts live free of the bucket's cache lines.
	until int64
	// forget drops a debt that finds no room (WithForgetOverflow)
	// instead of merging it into a shared bound.
	forget bool
	// rng picks the entry a full bucket moves out (xorshift).
	rng uint64
	// failed counts insertions in a row that found no room, up to 4:
	// each one halves the moves of the next (see maxKicks), since in a
	// table that is full every move is in vain.
	failed int
	// merged and forgotten count debts that lost their own entry.
	merged, forgotten uint64
}

// debtWays entries of 16 bytes fill one 64-byte bucket, a cache line.
const debtWays = 4

type debtBucket [debtWays]debtEntry

// debtEntry is one key's debt: word holds the key's fingerprint above
// the amount (amtBits). A zero fingerprint marks the bucket's shared
// bound; a zero entry owes nothing.
type debtEntry struct {
	at   int64
	word uint64
}

const (
	amtBits = 26
	amtMask = 1<<amtBits - 1
	// markerAmt is the amount of a shield (see debts); no algorithm's
	// amount reaches it (a bucket's at most maxLimit, a counter's packed
	// sum below 2^26 - 2^24, a log's at most its saturated amount: see
	// TestDebtAmountsFitTheMemory).
	markerAmt = amtMask
	// maxKicks bounds the entries one insertion moves, halved for each
	// insertion before it that failed (see debts.failed).
	maxKicks = 64
)

// DefaultDebtsPerKey is the room of the debt memory, in debts per key of
// WithMaxKeys, unless WithDebtMemory says otherwise: after a spray of up
// to about eight times WithMaxKeys distinct keys that each spent their
// quota, every debt still has an entry of its own, so no stranger waits
// (see WithDebtMemory for the figures). Each debt costs 16 bytes.
const DefaultDebtsPerKey = 8

// maxDebtsPerKey bounds WithDebtMemory.
const maxDebtsPerKey = 64

func (e *debtEntry) fp() uint64          { return e.word >> amtBits }
func (e *debtEntry) debt() debt          { return debt{at: e.at, amt: uint32(e.word & amtMask)} }
func (e *debtEntry) live(now int64) bool { return e.debt().owes(now) }

// marker reports whether e is a shield (see debts).
func (e *debtEntry) marker() bool { return e.word&amtMask == markerAmt && e.fp() != 0 }

// newDebts returns a memory of n buckets; seed starts its random moves.
func newDebts(n int, forget bool, seed uint64) *debts {
	return &debts{buckets: make([]debtBucket, n), until: math.MinInt64, forget: forget, rng: seed | 1}
}

// place returns h's two buckets and its fingerprint (never 0). The
// fingerprint mixes every bit of h, so keys that share a bucket differ in
// it; the second bucket is derived from the first and the fingerprint
// alone, so that an entry can be moved without its key.
func (d *debts) place(h uint64) (b1, b2 uint32, fp uint64) {
	n := uint64(len(d.buckets))
	b1 = uint32((h >> 16 & 0xffffffff) * n >> 32)
	fp = (h * 0x9e3779b97f4a7c15) >> amtBits
	if fp == 0 {
		fp = 1
	}
	return b1, d.other(b1, fp), fp
}

// other returns the bucket of an entry with fingerprint fp that is not b
// (b itself when both are the same): other(other(b)) == b.
func (d *debts) other(b uint32, fp uint64) uint32 {
	n := uint32(len(d.buckets))
	x := uint32((fp * 0xc2b2ae3d27d4eb4f >> 32) * uint64(n) >> 32)
	if x >= b {
		return x - b
	}
	return x + n - b
}

// found is what the memory knows of a key.
type found struct {
	own   *debtEntry // the key's own entry, running or not; nil if none
	bound debt       // the shared bounds of its buckets still running
}

// owed returns the debt the key starts from at now: its own when it has
// an entry (a shield, or a debt that has run out, owes nothing), else the
// shared bounds of its buckets. A key's debt is never both in its own
// entry and in a bound: it joins a bound only by losing its entry, and
// an entry is written only for a key whose state started from everything
// the memory held about it.
func (f found) owed(now int64) debt {
	switch {
	case f.own == nil:
		return f.bound
	case f.own.marker() || !f.own.live(now):
		return debt{}
	}
	return f.own.debt()
}

// find looks h up at now.
func (d *debts) find(h uint64, now int64) found {
	if now > d.until {
		return found{} // every entry has run out
	}
	return d.lookup(h, now)
}

func (d *debts) lookup(h uint64, now int64) found {
	var f found
	b1, b2, fp := d.place(h)
	d.scan(&d.buckets[b1], fp, now, &f)
	if b2 != b1 {
		d.scan(&d.buckets[b2], fp, now, &f)
	}
	return f
}

func (d *debts) scan(b *debtBucket, fp uint64, now int64, f *found) {
	for i := range b {
		e := &b[i]
		switch e.fp() {
		case fp:
			f.own = e
		case 0:
			if e.live(now) {
				v := e.debt()
				v.shared = true
				f.bound = f.bound.max(v)
			}
		}
	}
}

// put makes v h's debt at now: h's own entry when v owes; otherwise no
// entry, or a shield while a shared bound binds h (a key that comes back
// owing nothing of its own, or less than its buckets' bounds).
func (d *debts) put(h uint64, v debt, now int64) {
	f := d.lookup(h, now)
	if !v.owes(now) && !f.bound.owes(now) {
		if f.own != nil {
			*f.own = debtEntry{}
		}
		return
	}
	d.write(h, f, v, now)
}

// reset frees h at now for good: no debt the memory holds now binds it
// later, even one that loses its entry and is merged into a bound of h's
// buckets after the reset. While the memory holds any running debt, h
// gets a shield lasting until the last of them ends; a bound made only
// of debts that come later may bind it, as it may bind any new key.
func (d *debts) reset(h uint64, now int64) {
	f := d.lookup(h, now)
	if d.forget || now >= d.until {
		if f.own != nil {
			*f.own = debtEntry{}
		}
		return
	}
	d.write(h, f, debt{}, now)
}

// write makes v h's own entry, or a shield if v owes nothing. A shield
// lasts until every debt the memory holds now has ended (until): every
// debt that may ever be merged into a bound of h's buckets, up to the
// next one written.
func (d *debts) write(h uint64, f found, v debt, now int64) {
	if !v.owes(now) {
		v = debt{at: d.until, amt: markerAmt}
	}
	d.until = max(d.until, v.at)
	b1, b2, fp := d.place(h)
	e := debtEntry{v.at, fp<<amtBits | uint64(v.amt)}
	switch {
	case f.own != nil:
		*f.own = e
	case d.take(&d.buckets[b1], e, now), d.take(&d.buckets[b2], e, now):
	default:
		d.insert(b1, e, now)
	}
}

// take puts e into a free entry of b, if there is one.
func (d *debts) take(b *debtBucket, e debtEntry, now int64) bool {
	for i := range b {
		if !b[i].live(now) {
			b[i] = e
			return true
		}
	}
	return false
}

// insert places e in a bucket of its, starting at b, whose entries are
// all running. At each step it looks for an entry of b whose other bucket
// has room, and moves it there to make room for e; if none has, it moves
// a random one out for e and goes on with that entry from its other
// bucket, up to maxKicks steps, then lets a debt lose its entry (see
// overflow).
func (d *debts) insert(b uint32, e debtEntry, now int64) {
	for range maxKicks >> d.failed {
		if d.shift(b, e, now) {
			d.failed = 0
			return
		}
		i := d.victim(&d.buckets[b])
		if i < 0 {
			break
		}
		e, d.buckets[b][i] = d.buckets[b][i], e
		b = d.other(b, e.fp())
		if d.take(&d.buckets[b], e, now) {
			d.failed = 0
			return
		}
	}
	d.failed = min(d.failed+1, 4)
	d.overflow(b, e)
}

// shift makes room for e in b, a full bucket, by moving one of its
// entries (not its shared bound) to a free entry of that entry's other
// bucket, and reports whether it could.
func (d *debts) shift(b uint32, e debtEntry, now int64) bool {
	bk := &d.buckets[b]
	for i := range bk {
		if fp := bk[i].fp(); fp != 0 && d.take(&d.buckets[d.other(b, fp)], bk[i], now) {
			bk[i] = e
			return true
		}
	}
	return false
}

// victim returns a random entry of b that may move (not its shared
// bound), or -1.
func (d *debts) victim(b *debtBucket) int {
	d.rng ^= d.rng << 13
	d.rng ^= d.rng >> 7
	d.rng ^= d.rng << 17
	start := int(d.rng>>32) % debtWays
	for j := range debtWays {
		if i := (start + j) % debtWays; b[i].fp() != 0 {
			return i
		}
	}
	return -1
}

// overflow disposes of e, an entry for which no room was found in b, a
// full bucket of its. With WithForgetOverflow, the debt that ends soonest
// among e and b's is forgotten. Otherwise nothing is forgotten: a debt
// loses its entry by being merged into a shared bound of one of e's
// buckets (see merge), and a shield keeps its key free. Only when
// neither of e's buckets holds a debt that can give way — both are full
// of shields, and for a shield e of a bound and shields too — does a
// shield give way: the one that ends soonest (see unshield).
func (d *debts) overflow(b uint32, e debtEntry) {
	bk := &d.buckets[b]
	if d.forget {
		if s := bk.soonest(); s >= 0 && e.at > bk[s].at {
			e, bk[s] = bk[s], e
		}
		d.forgotten++
		return
	}
	if d.merge(bk, e) {
		return
	}
	if alt := d.other(b, e.fp()); alt != b && d.merge(&d.buckets[alt], e) {
		return
	}
	d.unshield(bk, e)
}

// merge makes room for e in b, a full bucket of e's, by merging a debt
// into b's shared bound, and reports whether it could: b's soonest debt
// first becomes its bound if it has none; then the debt that ends sooner
// of e (a debt) and b's soonest loses its entry into the bound. A shield
// e needs an entry: it takes the soonest debt's.
func (d *debts) merge(b *debtBucket, e debtEntry) bool {
	bound, s := b.bound(), b.soonest()
	switch {
	case e.marker() && (s < 0 || bound < 0 && b.debts() < 2):
		return false // no debt can give its entry and still be bound
	case s < 0 && bound < 0:
		return false // only shields
	case bound < 0:
		b[s].word &= amtMask // the soonest debt becomes the bound
		d.merged++
		s = b.soonest()
	}
	if s >= 0 && (e.marker() || e.at > b[s].at) {
		e, b[s] = b[s], e
	}
	d.lose(b, e.debt())
	return true
}

// unshield makes room in b, a full bucket of shields and possibly a
// bound, for e, when no debt of e's buckets can give way (see overflow):
// the shield that ends soonest, e's or b's, is dropped, and a debt e takes
// its entry as b's shared bound. The
// key of the dropped shield may then be bound by the bounds of its
// buckets, as any new key is: the price of forgetting no debt.
func (d *debts) unshield(b *debtBucket, e debtEntry) {
	s := -1
	for i := range b {
		if b[i].marker() && (s < 0 || b[i].at < b[s].at) {
			s = i
		}
	}
	switch {
	case e.marker():
		if s >= 0 && e.at > b[s].at {
			b[s] = e
		}
	default: // b holds nothing but shields (else merge would have made room)
		b[s] = debtEntry{e.at, e.word & amtMask}
		d.merged++
	}
}

// lose merges v, a debt that lost its entry in b, into b's shared bound.
func (d *debts) lose(b *debtBucket, v debt) {
	d.merged++
	i := b.bound()
	m := v.max(b[i].debt())
	b[i] = debtEntry{m.at, uint64(m.amt)}
}

// bound returns the index of b's shared bound, or -1. It is called on
// full buckets only, whose entries all run.
func (b *debtBucket) bound() int {
	for i := range b {
		if b[i].fp() == 0 {
			return i
		}
	}
	return -1
}

// soonest returns the index of b's own debt that ends first (not a
// shield, not the bound), or -1.
func (b *debtBucket) soonest() int {
	s := -1
	for i := range b {
		if b[i].fp() != 0 && !b[i].marker() && (s < 0 || b[i].at < b[s].at) {
			s = i
		}
	}
	return s
}

// debts returns how many of b's entries are own debts.
func (b *debtBucket) debts() int {
	n := 0
	for i := range b {
		if b[i].fp() != 0 && !b[i].marker() {
			n++
		}
	}
	return n
}

// remap replaces every debt the memory holds, its own entries' and its
// shared bounds', by f of it (a bound is passed with shared set), at now:
// after a change of rate, each in the units of the new one. An entry that
// owes nothing afterwards is freed; a shield lasts, as when it was
// written, until every debt the memory holds afterwards has ended (see
// write), and goes when none runs.
func (d *debts) remap(f func(debt) debt, now int64) {
	d.until = math.MinInt64
	for b := range d.buckets {
		for i := range d.buckets[b] {
			e := &d.buckets[b][i]
			if !e.live(now) || e.marker() {
				continue
			}
			v := e.debt()
			v.shared = e.fp() == 0
			v = f(v)
			if !v.owes(now) {
				*e = debtEntry{}
				continue
			}
			*e = debtEntry{v.at, e.word&^amtMask | uint64(v.amt)}
			d.until = max(d.until, v.at)
		}
	}
	for b := range d.buckets {
		for i := range d.buckets[b] {
			switch e := &d.buckets[b][i]; {
			case !e.live(now) || !e.marker():
			case d.until > now:
				e.at = d.until
			default:
				*e = debtEntry{}
			}
		}
	}
}
