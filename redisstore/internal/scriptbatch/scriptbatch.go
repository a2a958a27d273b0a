// Package scriptbatch lets goredisstore and rueidisstore send many calls
// of one decision script as a single call of its batch script, so that
// the server runs many decisions per EVALSHA.
//
// Group commit (package groupcommit) already sends concurrent calls in
// one pipeline, but the server still runs one script per decision, and
// most of its time goes to what each call repeats: turning its
// arguments into Lua strings, reading TIME, setting up the call. A batch
// script runs the decisions of one algorithm in turn, in one call:
//
//   - Its keys are one key per entry, its arguments the entry count, then
//     for each entry a header and the entry's arguments. The header is ""
//     when the entry's arguments are those of the entry before it (the
//     common case: one limiter, one cost, the server's clock), which then
//     are not sent again; otherwise it is the number of arguments that
//     follow.
//   - It reads TIME once for the whole batch: the batch runs atomically,
//     so its decisions are made at one instant, in turn, as if they came
//     at the same microsecond.
//   - Each entry runs the algorithm's own script, unchanged, in a
//     protected call: an entry that raises an error (a malformed state,
//     a write refused for memory) fails alone.
//   - The reply is one flat array of integers: for each entry, the number
//     of integers of its reply followed by them, or for an entry that
//     failed, -1 - m followed by the m bytes of its error message.
//
// redisstore registers each batchable script with its batch script
// (Register); an adapter looks an EVALSHA's digest up (Lookup) to know
// whether it can go into a batch. Only single-key calls are batched. On
// a Redis Cluster the keys of one batch must hash to one slot (Slot), as
// for any command with several keys, so an adapter groups by slot there.
// A batch script's reply that proves it did not run (NOSCRIPT, MOVED,
// ASK, TRYAGAIN) lets the adapter send it again, as EVAL of its source or
// as its entries' own calls, without charging any decision twice.
package scriptbatch

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxEntries bounds the decisions of one batch script call: each decision
// does bounded work, and a call holds the server for all of its entries,
// so a batch longer than this is split into several calls, sent in the
// same pipeline.
const MaxEntries = 64

// Script is a batch script: its source and SHA1 digest.
type Script struct {
	Src, SHA string
}

// scripts maps the digest of each batchable script to its batch script.
// It is written only by Register, from package initialisation, before any
// call is sent, and read concurrently after.
var scripts = map[string]*Script{}

// Register records that calls of the script whose digest is single can be
// sent as entries of batch. It is called from package initialisation only.
func Register(single string, batch *Script) { scripts[single] = batch }

// Lookup returns the batch script of the script whose digest is sha, or
// nil if it has none.
func Lookup(sha string) *Script { return scripts[sha] }

// Batch is one call of a batch script being built: the keys and
// arguments of its entries, and where each came from.
type Batch struct {
	Script *Script
	// Calls are the adapter's indexes of the entries' calls, in order.
	Calls []int
	// Keys are the entries' keys, one each.
	Keys []string
	// Args are the entry count, then each entry's header and arguments;
	// Args[0] is filled in by Finish.
	Args []string
	prev []string // the arguments of the last entry
}

// Add appends an entry: call is the adapter's index of it, key its only
// key and args its arguments. Its arguments are sent only if they are not
// those of the entry before it.
func (b *Batch) Add(call int, key string, args []string) {
	if len(b.Args) == 0 {
		b.Args = append(b.Args, "")
	}
	b.Calls = append(b.Calls, call)
	b.Keys = append(b.Keys, key)
	if len(b.Calls) > 1 && equal(args, b.prev) {
		b.Args = append(b.Args, "")
		return
	}
	b.Args = append(b.Args, strconv.Itoa(len(args)))
	b.Args = append(b.Args, args...)
	b.prev = args
}

// Len returns the number of entries.
func (b *Batch) Len() int { return len(b.Calls) }

// Finish fills in the entry count; the batch is then ready to send.
func (b *Batch) Finish() { b.Args[0] = strconv.Itoa(len(b.Calls)) }

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// EntryError is the error an entry of a batch raised in its script: its
// message as the server formatted it. The other entries ran.
type EntryError string

func (e EntryError) Error() string { return string(e) }

// ErrMalformedReply is returned by Split for a reply that does not hold
// n entries.
var ErrMalformedReply = errors.New("scriptbatch: malformed batch reply")

// Split cuts a batch script's reply r into its n entries' replies and
// calls each(i, reply, err) for each entry i in order, with the entry's
// integers (a slice of r) or its error. It returns an error wrapping
// ErrMalformedReply, before calling each, if r does not hold exactly n
// entries.
func Split(r []int64, n int, each func(i int, reply []int64, err error)) error {
	// Check the whole reply first, so that either every entry gets its
	// reply or none does.
	at := 0
	for i := 0; i < n; i++ {
		if at >= len(r) {
			return fmt.Errorf("%w: %d entries of %d", ErrMalformedReply, i, n)
		}
		m := r[at]
		if m < 0 {
			m = -1 - m
		}
		if m > int64(len(r)-at-1) {
			return fmt.Errorf("%w: entry %d runs past the end", ErrMalformedReply, i)
		}
		at += 1 + int(m)
	}
	if at != len(r) {
		return fmt.Errorf("%w: %d integers after %d entries", ErrMalformedReply, len(r)-at, n)
	}
	at = 0
	for i := 0; i < n; i++ {
		m := r[at]
		if m >= 0 {
			each(i, r[at+1:at+1+int(m):at+1+int(m)], nil)
			at += 1 + int(m)
			continue
		}
		m = -1 - m
		msg := make([]byte, m)
		for j := range msg {
			msg[j] = byte(r[at+1+j])
		}
		each(i, nil, EntryError(msg))
		at += 1 + int(m)
	}
	return nil
}

// Group collects the batchable calls of one round trip into batches: one
// per batch script (and per slot on a Cluster) of at most MaxEntries
// entries.
type Group struct {
	// Batches are the batches, in the order they were started.
	Batches []*Batch
	open    map[groupKey]*Batch
}

type groupKey struct {
	script *Script
	slot   int
}

// Add puts call (the adapter's index) into a batch of script for slot
// (-1 when slots do not matter), starting a new one when the open one is
// full.
func (g *Group) Add(script *Script, slot int, call int, key string, args []string) {
	k := groupKey{script, slot}
	b := g.open[k]
	if b == nil || b.Len() == MaxEntries {
		if g.open == nil {
			g.open = make(map[groupKey]*Batch, 2)
		}
		b = &Batch{Script: script}
		g.open[k] = b
		g.Batches = append(g.Batches, b)
	}
	b.Add(call, key, args)
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, the part between the first '{' and the next '}' when that is
// not empty, or of the whole key, modulo 16384.
func Slot(key string) int {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					return int(crc16(key) & 16383)
				}
			}
			break
		}
	}
	return int(crc16(key) & 16383)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the hash
// of Redis Cluster's key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
