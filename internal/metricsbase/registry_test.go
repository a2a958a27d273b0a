package metricsbase

import (
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
)

// redisLike and leaseLike stand for redisstore's Stats and LeaseStats,
// which this module cannot import.
type (
	redisLike struct{ Errors uint64 }
	leaseLike struct{ Stranded uint64 }
)

// remote is a limiter with Stats of the redisLike kind.
type remote struct{ floodgate.Limiter }

func (remote) Stats() redisLike { return redisLike{Errors: 3} }

// leasing is a remote limiter with LeaseStats too.
type leasing struct{ remote }

func (leasing) LeaseStats() leaseLike { return leaseLike{Stranded: 5} }

var errDuplicate = fmt.Errorf("%w: name already registered", floodgate.ErrInvalidOption)

type entry struct {
	name string
	Sources[redisLike, leaseLike]
}

func newRegistry() *Registry[redisLike, leaseLike, entry] {
	return NewRegistry(errDuplicate, func(name string, s Sources[redisLike, leaseLike]) entry { return entry{name, s} })
}

// newBucket is a token bucket of 10 a minute with a store of 64 keys.
func newBucket(t testing.TB) *floodgate.TokenBucket {
	return metricstest.NewBucket(t, floodgate.PerMinute(10), floodgatetest.NewClock(metricstest.T0), floodgate.WithMaxKeys(64))
}

// TestSourcesOf: each kind of Stats is found, and only that kind.
func TestSourcesOf(t *testing.T) {
	tb := newBucket(t)
	if s := SourcesOf[redisLike, leaseLike](tb); s.Store == nil || s.Redis != nil || s.Lease != nil || s.Store().MaxKeys != 64 {
		t.Errorf("token bucket: store %v, redis %v, lease %v", s.Store != nil, s.Redis != nil, s.Lease != nil)
	}
	if s := SourcesOf[redisLike, leaseLike](remote{tb}); s.Store != nil || s.Redis == nil || s.Lease != nil || s.Redis().Errors != 3 {
		t.Errorf("remote: store %v, redis %v, lease %v", s.Store != nil, s.Redis != nil, s.Lease != nil)
	}
	s := SourcesOf[redisLike, leaseLike](leasing{remote{tb}})
	if s.Store != nil || s.Redis == nil || s.Lease == nil || s.Redis().Errors != 3 || s.Lease().Stranded != 5 {
		t.Errorf("leasing: store %v, redis %v, lease %v", s.Store != nil, s.Redis != nil, s.Lease != nil)
	}
	if s := SourcesOf[redisLike, leaseLike](metricstest.Bare{Limiter: tb}); !s.None() {
		t.Errorf("bare: %+v, want none", s)
	}
}

// TestRegistry: every misuse is refused with the sentinel that says so,
// a refused limiter leaves its name free, and All lists the rest in
// order.
func TestRegistry(t *testing.T) {
	r := newRegistry()
	tb := newBucket(t)
	if err := r.Watch("mem", tb); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("redis", remote{tb}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"Watch twice", r.Watch("mem", tb), errDuplicate},
		{"Register after Watch", r.Register("mem", tb), errDuplicate},
		{"empty name", r.Register("", tb), floodgate.ErrInvalidOption},
		{"name not ASCII", r.Watch("m\u00e9m", tb), floodgate.ErrInvalidOption},
		{"Watch nil", r.Watch("nil", nil), floodgate.ErrInvalidOption},
		{"Register nil", r.Register("nil", nil), floodgate.ErrInvalidOption},
		{"Watch without Stats", r.Watch("bare", metricstest.Bare{Limiter: tb}), floodgate.ErrInvalidOption},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if err := r.Watch("empty", nil); errors.Is(err, errDuplicate) {
		t.Fatalf("duplicate error for a new name: %v", err)
	}
	// Register takes a limiter without Stats; its refused Watch had not
	// taken the name.
	if err := r.Register("bare", metricstest.Bare{Limiter: tb}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range r.All() {
		names = append(names, e.name)
	}
	if fmt.Sprint(names) != "[mem redis bare]" {
		t.Fatalf("registered %v, want [mem redis bare]", names)
	}
	if all := r.All(); all[1].Redis == nil || all[2].None() != true {
		t.Fatalf("sources lost: %+v", all)
	}
}

// TestRegistryConcurrent: adds and reads at once (run with -race).
func TestRegistryConcurrent(t *testing.T) {
	r := newRegistry()
	tb := newBucket(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			for _, e := range r.All() {
				_ = e.Store()
			}
		}
	}()
	for i := 0; i < 200; i++ {
		if err := r.Watch(fmt.Sprint("l", i), tb); err != nil {
			t.Error(err)
		}
	}
	<-done
	if n := len(r.All()); n != 200 {
		t.Fatalf("%d registered, want 200", n)
	}
}
