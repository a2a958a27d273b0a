package floodgatetest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// scheduler is the deterministic scheduler: the workers of a round run
// one at a time, each until its next yield point (the start of each of
// its operations, a read of CheckConfig.Now, a resolver call, a point
// floodgate marks in a compound decision), and the scheduler picks which
// parked worker goes on next from its seeded generator — and, under
// Checker.MovingClock, when the clock moves. The same program and seed
// give the same interleaving.
//
// A yield point reached while holding a lock that another worker then
// waits for would hang the round: the worker resumed never parks again.
// A watchdog sees the round make no progress for deadlockAfter, records
// where every worker was parked, and lets them all run free so that the
// run ends; the check then fails with that record (see run.check).
type scheduler struct {
	rng     *rand.Rand
	events  chan schedEvent
	resume  []chan struct{}
	free    chan struct{} // closed when the scheduler gives up: yields return at once
	freed   atomic.Bool
	current atomic.Int32      // the worker running, -1 for none
	where   []string          // each worker's last yield point
	until   []<-chan struct{} // what each parked worker waits for, if anything
	// tick, if set, moves the clock by step; under Checker.MovingClock the
	// scheduler calls it at one scheduling step in six, by up to the
	// round's Tick, while the calls it has parked are in flight.
	tick     func(step time.Duration)
	deadlock string
	steps    int
}

// deadlockAfter is how long a resumed worker may run without reaching a
// yield point before the scheduler presumes it blocked by a parked one.
var deadlockAfter = 5 * time.Second

type schedEvent struct {
	w     int
	done  bool
	where string
	until <-chan struct{}
}

func newScheduler(seed uint64, workers int) *scheduler {
	s := &scheduler{
		rng:    rand.New(rand.NewPCG(seed, 0x5c4ed01e)),
		events: make(chan schedEvent, workers),
		resume: make([]chan struct{}, workers),
		free:   make(chan struct{}),
		where:  make([]string, workers),
		until:  make([]<-chan struct{}, workers),
	}
	for i := range s.resume {
		s.resume[i] = make(chan struct{})
	}
	s.current.Store(-1)
	return s
}

// yield parks worker w at the point where until the scheduler resumes it,
// which it does only once until is closed, if until is not nil.
func (s *scheduler) yield(w int, where string, until <-chan struct{}) {
	if s.freed.Load() {
		return
	}
	s.current.Store(-1)
	s.events <- schedEvent{w: w, where: where, until: until}
	select {
	case <-s.resume[w]:
	case <-s.free:
	}
}

// yieldCurrent parks the worker running, if any: for yield points that
// do not know their caller (a clock read).
func (s *scheduler) yieldCurrent(where string) {
	if w := s.current.Load(); w >= 0 {
		s.yield(int(w), where, nil)
	}
}

// done reports that worker w has finished its operations of the round.
func (s *scheduler) done(w int) {
	s.current.Store(-1)
	s.events <- schedEvent{w: w, done: true}
}

// round runs the workers in active, each started by start on a goroutine
// of its own, to the end of their operations, ops of them in all.
// tickStep > 0 moves the clock during the round (see tick).
//
// Half the rounds, drawn, pick the next worker uniformly among those
// parked (a random walk); the others as PCT does (Burckhardt et al.,
// "A randomized scheduler with probabilistic guarantees of finding
// bugs"): the workers get random priorities, the highest that is ready
// runs, and at two steps drawn at random the one about to run drops to
// the lowest. A random walk seldom lets one call run far ahead of
// another that it preempted at one exact point — a decision parked
// between its plan lookup and its lock while another moves the key —
// which is what PCT finds with a probability of about one over the calls
// times the steps.
func (s *scheduler) round(active []int, ops int, start func(w int), tickStep time.Duration) {
	state := make(map[int]int, len(active))
	for _, w := range active {
		state[w] = running
		start(w)
	}
	if len(active) == 0 {
		if tickStep > 0 && s.tick != nil {
			s.tick(tickStep)
		}
		return
	}
	order := s.newOrder(active, ops)
	timer := time.NewTimer(deadlockAfter)
	defer timer.Stop()
	for s.settle(state, timer) {
		ready, waiting := s.ready(active, state)
		if len(ready) == 0 && waiting > 0 {
			// Every parked call waits for work the limiter does on a
			// goroutine of its own (a PlanLimiter's lookup): let it end.
			ready = s.awaitOne(active, state)
			if ready == nil {
				s.abandon(state)
				return
			}
		}
		if len(ready) == 0 {
			return
		}
		if tickStep > 0 && s.tick != nil && s.rng.IntN(6) == 0 {
			s.tick(time.Duration(1+s.rng.Int64N(int64(tickStep/time.Millisecond))) * time.Millisecond)
		}
		w := order.next(s, ready)
		state[w] = running
		s.current.Store(int32(w))
		s.resume[w] <- struct{}{}
	}
}

// A worker's state in a round.
const (
	running = iota
	parked
	finished
)

// settle waits until no worker of state runs; false if the round made no
// progress for deadlockAfter (then every worker ran free to its end).
func (s *scheduler) settle(state map[int]int, timer *time.Timer) bool {
	for count(state, running) > 0 {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(deadlockAfter)
		select {
		case ev := <-s.events:
			if ev.done {
				state[ev.w] = finished
			} else {
				state[ev.w] = parked
				s.where[ev.w], s.until[ev.w] = ev.where, ev.until
			}
		case <-timer.C:
			s.abandon(state)
			return false
		}
	}
	return true
}

// abandon gives the round up (giveUp) and waits for every worker to end.
func (s *scheduler) abandon(state map[int]int) {
	s.giveUp(state)
	for count(state, finished) < len(state) {
		if ev := <-s.events; ev.done {
			state[ev.w] = finished
		}
	}
}

// ready returns the parked workers that may run, and how many parked
// ones wait for another.
func (s *scheduler) ready(active []int, state map[int]int) (ready []int, waiting int) {
	for _, w := range active {
		if state[w] != parked {
			continue
		}
		if !closed(s.until[w]) {
			waiting++
			continue
		}
		ready = append(ready, w)
	}
	return ready, waiting
}

// awaitOne waits, for deadlockAfter at most, until a parked worker's
// wait is over, and returns the workers that may run then; nil if none
// may.
func (s *scheduler) awaitOne(active []int, state map[int]int) []int {
	for deadline := time.Now().Add(deadlockAfter); time.Now().Before(deadline); {
		if ready, _ := s.ready(active, state); len(ready) > 0 {
			return ready
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// order is how a round picks its next worker: uniformly, or PCT's way.
type order struct {
	pct    bool
	prio   map[int]int
	lowest int
	change map[int]bool
	step   int
}

func (s *scheduler) newOrder(active []int, ops int) *order {
	o := &order{pct: s.rng.IntN(2) == 0, prio: map[int]int{}, lowest: -1, change: map[int]bool{}}
	for i, j := range s.rng.Perm(len(active)) {
		o.prio[active[i]] = j
	}
	for range 2 {
		o.change[s.rng.IntN(6*ops+1)] = true
	}
	return o
}

// next returns the worker of ready to resume.
func (o *order) next(s *scheduler, ready []int) int {
	s.steps++
	w := ready[s.rng.IntN(len(ready))]
	if o.pct {
		w = highest(ready, o.prio)
		if o.change[o.step] {
			o.prio[w], o.lowest = o.lowest, o.lowest-1
			w = highest(ready, o.prio)
		}
	}
	o.step++
	return w
}

// giveUp records a round that made no progress and lets every worker run
// free.
func (s *scheduler) giveUp(state map[int]int) {
	var b strings.Builder
	var ws []int
	for w := range state {
		ws = append(ws, w)
	}
	sort.Ints(ws)
	fmt.Fprintf(&b, "deterministic scheduler: a resumed call reached no yield point for %v; "+
		"it is most likely blocked on a lock held by a call parked at a yield point, which means a yield point inside a critical section "+
		"(a CheckConfig.Now given to a limiter that reads the time under its own lock?). Where each worker was:", deadlockAfter)
	for _, w := range ws {
		st := "parked at " + s.where[w]
		switch state[w] {
		case running:
			st = "running (resumed from " + s.where[w] + ")"
		case finished:
			st = "done"
		}
		fmt.Fprintf(&b, "\n\tworker %d: %s", w, st)
	}
	s.deadlock = b.String()
	s.freed.Store(true)
	close(s.free)
}

// highest returns the worker of ready with the highest priority.
func highest(ready []int, prio map[int]int) int {
	best := ready[0]
	for _, w := range ready[1:] {
		if prio[w] > prio[best] {
			best = w
		}
	}
	return best
}

// closed reports whether ch is nil or closed.
func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func count(state map[int]int, want int) int {
	n := 0
	for _, st := range state {
		if st == want {
			n++
		}
	}
	return n
}
