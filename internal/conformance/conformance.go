package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Driver serves a Setup over one transport.
type Driver interface {
	// Name names the transport in test names, e.g. "net/http".
	Name() string
	// Start serves the handler behind the transport's limit adapter,
	// configured by s: keyed by the call's client (HTTPKey's header, or
	// the transport's equivalent; a call without one has no key), with
	// s.Hook as the decision hook, fail-open if s.FailOpen, and, if
	// s.CountFailures, counting only the calls the handler fails (HTTP
	// 401, gRPC Unauthenticated). The server stops with the test.
	Start(t *testing.T, s Setup) Client
}

// Client makes calls over a driver's transport.
type Client interface {
	// Do makes one call as the step says and reports what the client
	// saw. It returns when the call is answered or ctx is done.
	Do(ctx context.Context, st Step) Answer
}

// Setup is what a case serves.
type Setup struct {
	Limiter       floodgate.Limiter
	FailOpen      bool
	CountFailures bool
	// CostAfter makes the adapter charge each call the cost its handler
	// reports with floodgate.ReportCost (the transport's WithCostAfter
	// with its CostReported).
	CostAfter bool
	// Wait, if set, makes the adapter hold calls for their turn within
	// these bounds (WithWait), asleep on Timer (WithWaitTimer).
	Wait  *floodgate.WaitLimits
	Timer func(time.Duration) (<-chan time.Time, func() bool)
	// Deciding, if set, is signalled when a call is inside the decision
	// (the Hanging limiter, or a wait timer that holds the call): a
	// HangUp step gives up then.
	Deciding chan struct{}
	// Stats, if set, is the GateStats the driver must give the adapter
	// (WithGateStats).
	Stats *floodgate.GateStats
	// Check, if set, is called once the steps are done: what the case
	// checks beyond the answers and the events.
	Check func() error
	// Hook is the decision hook the driver must install.
	Hook func(floodgate.DecisionEvent)
	// Ran is called by the handler each time it runs.
	Ran func()
}

// Action is what the handler does with a call.
type Action string

// The handler's actions.
const (
	Succeed Action = "succeed"
	Fail    Action = "fail" // the client's failure: HTTP 401, gRPC Unauthenticated
	Panic   Action = "panic"
)

// Step is one call of a case.
type Step struct {
	// Client is the call's key; "" sends none (a client error).
	Client string
	// Action is what the handler should do.
	Action Action
	// HangUp makes the client give up while the limiter decides.
	HangUp bool
	// Cost, if positive, is reported by the handler with
	// floodgate.ReportCost as the call's real cost.
	Cost int
	// Want is what the client must see.
	Want Kind
	// RetryAfter, for a denial (also an Overloaded one), is the wait the
	// answer must carry (HTTP Retry-After in seconds, gRPC RetryInfo), 0
	// for none.
	RetryAfter time.Duration
}

// Kind is what a client saw, in the table's terms.
type Kind string

// What a client can see.
const (
	OK          Kind = "ok"           // the handler succeeded
	Failed      Kind = "failed"       // the handler failed the call
	Panicked    Kind = "panicked"     // the handler panicked (the call broke off, or an internal error)
	Denied      Kind = "denied"       // the limit denied the call
	Overloaded  Kind = "overloaded"   // refused with a wait: the service is at a service-wide capacity (HTTP 503 with Retry-After, Unavailable with RetryInfo)
	ClientError Kind = "client error" // refused for the client's own doing
	Unavailable Kind = "unavailable"  // refused because the limiter, or keying the call, failed
	HungUp      Kind = "hung up"      // the client gave up before an answer
)

// Answer is what the client saw of one call.
type Answer struct {
	Kind Kind
	// RetryAfter is the wait a denial carried, 0 if none.
	RetryAfter time.Duration
	// Detail says more, for failure messages (a status, an error).
	Detail string
}

// Case is one row of the table.
type Case struct {
	Name string
	// Setup returns the case's set-up, with a fresh limiter.
	Setup func() Setup
	Steps []Step
	// Runs is how often the handler must have run.
	Runs int
	// Event checks the decision events; nil accepts any.
	Event func(events []floodgate.DecisionEvent) error
}

// T0 is the frozen time of the cases' token buckets: no quota comes back
// during a case.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Store builds the limiters of the cases: in memory (Memory), or on
// another store whose limiters must decide as the in-memory ones do (a
// Redis store in redisstore's tests). Each call returns a fresh limiter,
// with no state shared with any other.
type Store struct {
	// Name names the store in test names.
	Name string
	// Bucket returns a token bucket of limit per hour, on a clock frozen
	// at T0: no quota comes back during a case.
	Bucket func(limit int) floodgate.Limiter
	// InFlight returns an in-flight limit of n per key, or for the whole
	// service.
	InFlight func(n int, serviceWide bool) floodgate.Limiter
}

// Memory is the store of floodgate's in-memory limiters.
var Memory = Store{
	Name: "memory",
	Bucket: func(limit int) floodgate.Limiter {
		b, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: limit, Period: time.Hour}, floodgate.WithClock(func() time.Time { return T0 }))
		if err != nil {
			panic(err) // constant arguments
		}
		return b
	},
	InFlight: func(n int, serviceWide bool) floodgate.Limiter {
		build := floodgate.NewInFlight
		if serviceWide {
			build = floodgate.NewServiceInFlight
		}
		l, err := build(n)
		if err != nil {
			panic(err) // constant arguments
		}
		return l
	},
}

// Failing is a limiter whose store is down.
type Failing struct{}

// ErrStoreDown is Failing's error.
var ErrStoreDown = errors.New("conformance: store down")

// AllowN fails.
func (Failing) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{}, ErrStoreDown
}

// Unkeyable is a step's Client that the drivers' key functions fail to
// key with an error of their own, ErrKeyFailed (see KeyFailure).
const Unkeyable = "unkeyable"

// ErrKeyFailed is the key functions' error for Unkeyable: no sentinel of
// floodgate's, as a custom key function's failed lookup would return.
var ErrKeyFailed = errors.New("conformance: the key function's lookup failed")

// KeyFailure passes a key function's result on, except for the key
// Unkeyable, which it fails with ErrKeyFailed. Every driver's key function
// goes through it.
func KeyFailure(key string, err error) (string, error) {
	if err == nil && key == Unkeyable {
		return "", ErrKeyFailed
	}
	return key, err
}

// Hanging is a limiter that decides only when the caller gives up, as a
// network store does whose round trip outlasts the client: it signals
// Deciding, then fails with the context's error.
type Hanging struct {
	Deciding chan struct{}
}

// AllowN waits for ctx, or fails after a minute (a transport that never
// tells its server of the hang-up fails the case, not the test binary).
func (h *Hanging) AllowN(ctx context.Context, _ string, _ int) (floodgate.Decision, error) {
	h.Deciding <- struct{}{}
	select {
	case <-ctx.Done():
		return floodgate.Decision{}, fmt.Errorf("store: %w", ctx.Err())
	case <-time.After(time.Minute):
		return floodgate.Decision{}, errors.New("conformance: the server never saw the client hang up")
	}
}

// Cases is the table, with the limiters of store s.
func Cases(s Store) []Case {
	bucket := s.Bucket
	return append([]Case{
		{
			Name:  "allowed",
			Setup: func() Setup { return Setup{Limiter: bucket(2)} },
			Steps: []Step{{Client: "ann", Action: Succeed, Want: OK}, {Client: "ann", Action: Succeed, Want: OK}},
			Runs:  2,
			Event: allBlocked(false),
		},
		{
			Name:  "denied",
			Setup: func() Setup { return Setup{Limiter: bucket(1)} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: time.Hour},
				{Client: "bob", Action: Succeed, Want: OK}, // another client's quota
			},
			Runs: 2,
		},
		{
			Name:  "client error, also under fail-open",
			Setup: func() Setup { return Setup{Limiter: bucket(5), FailOpen: true} },
			Steps: []Step{{Client: "", Action: Succeed, Want: ClientError}, {Client: "", Action: Succeed, Want: ClientError}},
			Runs:  0,
			Event: allErr(floodgate.ErrNoKey, true),
		},
		{
			// Fail-open forgives the limiter's failures only: a key
			// function's own error is refused, and spends nothing.
			Name:  "key function error, also under fail-open",
			Setup: func() Setup { return Setup{Limiter: bucket(1), FailOpen: true} },
			Steps: []Step{
				{Client: Unkeyable, Action: Succeed, Want: Unavailable},
				{Client: Unkeyable, Action: Succeed, Want: Unavailable},
				{Client: "ann", Action: Succeed, Want: OK},
			},
			Runs:  1,
			Event: firstErr(2, ErrKeyFailed, true),
		},
		{
			Name:  "limiter failure, fail closed",
			Setup: func() Setup { return Setup{Limiter: Failing{}} },
			Steps: []Step{{Client: "ann", Action: Succeed, Want: Unavailable}},
			Runs:  0,
			Event: allErr(ErrStoreDown, true),
		},
		{
			Name:  "limiter failure, fail open",
			Setup: func() Setup { return Setup{Limiter: Failing{}, FailOpen: true} },
			Steps: []Step{{Client: "ann", Action: Succeed, Want: OK}, {Client: "ann", Action: Succeed, Want: OK}},
			Runs:  2,
			Event: allErr(ErrStoreDown, false),
		},
		{
			Name: "hang-up never reaches the handler, also under fail-open",
			Setup: func() Setup {
				h := &Hanging{Deciding: make(chan struct{}, 1)}
				return Setup{Limiter: h, FailOpen: true, Deciding: h.Deciding}
			},
			Steps: []Step{{Client: "ann", Action: Succeed, HangUp: true, Want: HungUp}},
			Runs:  0,
			Event: allErr(context.Canceled, true),
		},
		{
			Name:  "count only failures, a panic counts",
			Setup: func() Setup { return Setup{Limiter: bucket(2), CountFailures: true} },
			Steps: []Step{
				{Client: "ann", Action: Succeed, Want: OK}, // given back
				{Client: "ann", Action: Panic, Want: Panicked},
				{Client: "ann", Action: Succeed, Want: OK},
				{Client: "ann", Action: Fail, Want: Failed},
				{Client: "ann", Action: Succeed, Want: Denied, RetryAfter: 30 * time.Minute},
				{Client: "ann", Action: Fail, Want: Denied, RetryAfter: 30 * time.Minute},
			},
			Runs: 4,
		},
	}, kindCases(s)...)
}

// allBlocked checks that every decision event has Blocked == blocked.
func allBlocked(blocked bool) func([]floodgate.DecisionEvent) error {
	return func(evs []floodgate.DecisionEvent) error {
		for _, ev := range evs {
			if ev.Blocked != blocked {
				return fmt.Errorf("event %+v: blocked %v, want %v", ev, ev.Blocked, blocked)
			}
		}
		return nil
	}
}

// allErr checks that there are events, each with an error wrapping want
// and Blocked == blocked.
func allErr(want error, blocked bool) func([]floodgate.DecisionEvent) error {
	return func(evs []floodgate.DecisionEvent) error {
		if len(evs) == 0 {
			return errors.New("no decision event")
		}
		for _, ev := range evs {
			if !errors.Is(ev.Err, want) || ev.Blocked != blocked {
				return fmt.Errorf("event with error %v, blocked %v; want %v, blocked %v", ev.Err, ev.Blocked, want, blocked)
			}
		}
		return nil
	}
}

// firstErr checks that the first n decision events have an error
// wrapping want and Blocked == blocked, and the others no error.
func firstErr(n int, want error, blocked bool) func([]floodgate.DecisionEvent) error {
	return func(evs []floodgate.DecisionEvent) error {
		if len(evs) < n {
			return fmt.Errorf("%d decision events, want at least %d", len(evs), n)
		}
		if err := allErr(want, blocked)(evs[:n]); err != nil {
			return err
		}
		for _, ev := range evs[n:] {
			if ev.Err != nil {
				return fmt.Errorf("event after the errors with error %v", ev.Err)
			}
		}
		return nil
	}
}

// Run runs every case of the table through d, with in-memory limiters.
func Run(t *testing.T, d Driver) { RunStore(t, d, Memory) }

// RunStore runs every case of the table through d, with the limiters of
// store s.
func RunStore(t *testing.T, d Driver, s Store) {
	for _, c := range Cases(s) {
		t.Run(c.Name, func(t *testing.T) { runCase(t, d, c) })
	}
}

// recorder collects a case's decision events and handler runs.
type recorder struct {
	mu     sync.Mutex
	events []floodgate.DecisionEvent
	runs   int
	got    chan struct{} // one signal per event
}

func (r *recorder) hook(ev floodgate.DecisionEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recorder) ran() {
	r.mu.Lock()
	r.runs++
	r.mu.Unlock()
}

func runCase(t *testing.T, d Driver, c Case) {
	rec := &recorder{got: make(chan struct{}, 64)}
	s := c.Setup()
	s.Hook, s.Ran = rec.hook, rec.ran
	client := d.Start(t, s)
	for i, st := range c.Steps {
		var got Answer
		if st.HangUp {
			got = hangUp(t, client, s, st, rec)
		} else {
			got = client.Do(context.Background(), st)
		}
		if got.Kind != st.Want || ((st.Want == Denied || st.Want == Overloaded) && got.RetryAfter != st.RetryAfter) {
			t.Errorf("%s, step %d (%s %s): saw %s (retry after %v; %s), want %s (retry after %v)",
				d.Name(), i, st.Client, st.Action, got.Kind, got.RetryAfter, got.Detail, st.Want, st.RetryAfter)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.runs != c.Runs {
		t.Errorf("%s: the handler ran %d times, want %d", d.Name(), rec.runs, c.Runs)
	}
	if c.Event != nil {
		if err := c.Event(rec.events); err != nil {
			t.Errorf("%s: %v", d.Name(), err)
		}
	}
	if s.Check != nil {
		if err := s.Check(); err != nil {
			t.Errorf("%s: %v", d.Name(), err)
		}
	}
}

// hangUp makes a call and gives up once the limiter is deciding, then
// waits, bounded, for the server to report the decision it could not
// make: the server learns of the hang-up after the client has gone.
func hangUp(t *testing.T, client Client, s Setup, st Step, rec *recorder) Answer {
	if s.Deciding == nil {
		t.Fatal("a hang-up step needs a Setup with Deciding")
	}
	for len(rec.got) > 0 {
		<-rec.got // the events of earlier steps
	}
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan Answer, 1)
	go func() { answered <- client.Do(ctx, st) }()
	wait(t, s.Deciding, "the call to be inside the decision")
	cancel()
	got := <-answered
	wait(t, rec.got, "the server to report the hang-up")
	return got
}

// wait waits, bounded, for one signal on ch.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}
