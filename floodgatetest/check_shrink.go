package floodgatetest

import (
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Shrinking: delta debugging (Zeller's ddmin) over the program's rounds,
// then over its operations, then over its workers, keeping a candidate
// whenever it still fails with the same kind of violation. A candidate
// under the deterministic scheduler is run twice (the limiter's own hash
// seeds differ from run to run) three times, under the program's seed
// and the two after it (the shrunk program keeps the seed that failed), a
// free-running one up to five times.

// shrinkBudget bounds the time spent shrinking one failure.
func shrinkBudget() time.Duration {
	if envFull() {
		return 2 * time.Minute
	}
	return 20 * time.Second
}

// shrink returns the smallest program found that still fails as f did,
// and its failure.
func (c *checker) shrink(log logger, p Program, f *failure) (Program, *failure) {
	deadline := time.Now().Add(shrinkBudget())
	best, bestF := p, f
	tries := 3
	if !p.Deterministic {
		tries = 5
	}
	fails := func(q Program) (Program, *failure) {
		if time.Now().After(deadline) {
			return q, nil
		}
		for i := range tries {
			if q.Deterministic && i > 0 {
				// Another interleaving of the same operations: one
				// operation fewer changes the scheduler's draws anyway.
				q.Seed = p.Seed + uint64(i)
			}
			if g, _ := c.runProgram(log, q); g != nil && g.kind == f.kind {
				return q, g
			}
		}
		return q, nil
	}
	// Rounds, then operations: remove chunks, halving their size.
	for _, byOps := range []bool{false, true} {
		size := func(q Program) int {
			if byOps {
				return q.size()
			}
			return len(q.Rounds)
		}
		for chunk := max(size(best)/2, 1); chunk >= 1; chunk /= 2 {
			for start := 0; start < size(best); {
				var cand Program
				if byOps {
					cand = best.withoutOps(start, chunk)
				} else {
					cand = best.withoutRounds(start, chunk)
				}
				if q, g := fails(cand); g != nil {
					best, bestF = q, g
					continue // the same start now holds the next chunk
				}
				start += chunk
			}
			if time.Now().After(deadline) {
				break
			}
		}
	}
	// Fewer workers, down to one: a failure that needs no concurrency.
	for w := 1; w < best.Workers; w++ {
		if cand := best.onWorkers(w); cand.size() == best.size() {
			if q, g := fails(cand); g != nil {
				best, bestF = q, g
				break
			}
		}
	}
	// Drop the rounds that are left empty, moving their clock into the
	// next one.
	if cand := best.compact(); len(cand.Rounds) < len(best.Rounds) {
		if q, g := fails(cand); g != nil {
			best, bestF = q, g
		}
	}
	return best, bestF
}

func (p Program) clone() Program {
	q := p
	q.Rounds = make([]Round, len(p.Rounds))
	for i, r := range p.Rounds {
		q.Rounds[i] = r
		q.Rounds[i].Ops = append([]Op(nil), r.Ops...)
	}
	return q
}

// withoutRounds removes n rounds from start.
func (p Program) withoutRounds(start, n int) Program {
	q := p.clone()
	q.Rounds = append(q.Rounds[:start:start], q.Rounds[min(start+n, len(q.Rounds)):]...)
	return q
}

// withoutOps removes n operations from the start-th, counting across
// rounds.
func (p Program) withoutOps(start, n int) Program {
	q := p.clone()
	i := 0
	for ri := range q.Rounds {
		var keep []Op
		for _, op := range q.Rounds[ri].Ops {
			if i < start || i >= start+n {
				keep = append(keep, op)
			}
			i++
		}
		q.Rounds[ri].Ops = keep
	}
	return q
}

// onWorkers maps every operation onto w workers.
func (p Program) onWorkers(w int) Program {
	q := p.clone()
	q.Workers = w
	for ri := range q.Rounds {
		for i := range q.Rounds[ri].Ops {
			q.Rounds[ri].Ops[i].Worker %= w
		}
	}
	return q
}

// compact merges each round without operations into the next.
func (p Program) compact() Program {
	q := p.clone()
	var out []Round
	var carry time.Duration
	for _, r := range q.Rounds {
		if len(r.Ops) == 0 {
			carry += r.Advance + r.Tick
			continue
		}
		r.Advance += carry
		carry = 0
		out = append(out, r)
	}
	q.Rounds = out
	return q
}

// reproTest prints a test that replays p.
func (c *checker) reproTest(p Program, f *failure) string {
	name := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return -1
	}, c.Name)
	var b strings.Builder
	fmt.Fprintf(&b, "func TestCheckRepro%s%d(t *testing.T) {\n", name, p.Seed)
	fmt.Fprintf(&b, "\t// floodgatetest.Check, seed %d: %s\n", p.Seed, f.kind)
	fmt.Fprintf(&b, "\tfloodgatetest.Replay(t, %s, %s)\n}\n", c.Source, strings.ReplaceAll(p.goString(), "\n", "\n\t"))
	return b.String()
}
