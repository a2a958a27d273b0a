package floodgatetest

import (
	"sync"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	steps := []struct {
		name string
		move func()
		want time.Time
	}{
		{"stands still", func() {}, start},
		{"advances", func() { c.Advance(1500 * time.Millisecond) }, start.Add(1500 * time.Millisecond)},
		{"goes back", func() { c.Advance(-time.Second) }, start.Add(500 * time.Millisecond)},
		{"is set", func() { c.Set(start.Add(time.Hour)) }, start.Add(time.Hour)},
	}
	for _, s := range steps {
		s.move()
		if got := c.Now(); !got.Equal(s.want) {
			t.Fatalf("%s: Now() = %v, want %v", s.name, got, s.want)
		}
	}
}

func TestClockConcurrentAdvance(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Advance(time.Millisecond)
				c.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(800*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() = %v after 800 concurrent 1ms steps, want %v", got, want)
	}
}
