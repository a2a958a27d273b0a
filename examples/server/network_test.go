package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

// The per-network ceilings: one IPv6 /48 holds 65,536 /64s, each a client
// of its own to the per-IP limits, so without a ceiling per /48 one site's
// allocation mints keys — made-up accounts, fresh sign-ups — as fast as
// it likes.

// networkServer is the example's handler on a fake clock, with the store
// of the limit named small bounded to maxKeys keys; it returns that
// limiter too.
func networkServer(t *testing.T, small string, maxKeys int) (http.Handler, *floodgatetest.Clock, func() floodgate.Stats) {
	t.Helper()
	clk := floodgatetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var stats func() floodgate.Stats
	opts := func(name string) []floodgate.Option {
		o := []floodgate.Option{floodgate.WithClock(clk.Now)}
		if name == small {
			o = append(o, floodgate.WithMaxKeys(maxKeys))
		}
		return o
	}
	h, err := exampleapp.New(exampleapp.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clk.Now}, exampleapp.Limiters{
		TokenBucket: func(name string, r floodgate.Rate) (floodgate.Limiter, error) {
			l, err := floodgate.NewTokenBucket(r, opts(name)...)
			if name == small {
				stats = l.Stats
			}
			return l, err
		},
		SlidingLog: func(name string, r floodgate.Rate) (floodgate.Limiter, error) {
			l, err := floodgate.NewSlidingLog(r, opts(name)...)
			if name == small {
				stats = l.Stats
			}
			return l, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, clk, stats
}

func post(h http.Handler, target, peer, body string) int {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.RemoteAddr = peer
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// slash64 returns a peer address in the i-th /64 of the /48 2001:db8:1::/48.
func slash64(i int) string { return fmt.Sprintf("[2001:db8:1:%x::1]:443", i) }

// TestRewardSprayFromOneSlash48 is the reported attack, scaled to a
// reward-account store of 4,096 keys: claims for made-up accounts from
// 4,000 /64s of one /48, three each (within the per-IP limit), spread over
// an hour. Without the per-/48 ceiling the account store would take 12,000
// made-up accounts that each spent their day — three times its size — and
// once such a spray outgrows the debt memory, new accounts are refused
// their first claim. With it, the /48 gets 300 claims an hour, and 1,000
// new accounts from elsewhere are all served.
func TestRewardSprayFromOneSlash48(t *testing.T) {
	const storeKeys, slash64s, perSlash64 = 4096, 4000, 3
	h, clk, stats := networkServer(t, "reward-account", storeKeys)
	served := 0
	for i := 0; i < slash64s; i++ {
		for j := 0; j < perSlash64; j++ {
			if post(h, "/rewards/claim", slash64(i), fmt.Sprintf(`{"accountId":"fake-%d-%d"}`, i, j)) == http.StatusOK {
				served++
			}
		}
		clk.Advance(time.Hour / slash64s)
	}
	if served != 300 {
		t.Errorf("one /48 got %d rewards in an hour, want its ceiling, 300", served)
	}
	st := stats()
	if st.Keys > 300 || st.EvictedLive != 0 {
		t.Errorf("the account store took more than the ceiling let through: %+v", st)
	}
	denied := 0
	for i := 0; i < 1000; i++ {
		peer := fmt.Sprintf("198.51.%d.%d:1", 100+i/250, i%250)
		if post(h, "/rewards/claim", peer, fmt.Sprintf(`{"accountId":"new-%d"}`, i)) != http.StatusOK {
			denied++
		}
	}
	if denied != 0 {
		t.Errorf("%d of 1,000 new accounts denied their first claim after the spray", denied)
	}
	t.Logf("one /48, %d claims from %d /64s over an hour: %d served; account store %+v; new accounts denied %d of 1,000",
		slash64s*perSlash64, slash64s, served, st, denied)
}

// TestNetworkCeilingHonestNetworks is the price of the ceiling for honest
// networks: a university /48 whose 250 users each sign up and claim once
// in an hour is served in full, and one abusive host among them, spending
// its own per-IP limit, takes only its 30 from the shared 300.
func TestNetworkCeilingHonestNetworks(t *testing.T) {
	h, _, _ := networkServer(t, "", 0)
	abuser := slash64(9999)
	for i := 0; i < 40; i++ {
		post(h, "/rewards/claim", abuser, fmt.Sprintf(`{"accountId":"abuse-%d"}`, i))
	}
	for i := 0; i < 250; i++ {
		if code := post(h, "/signup", slash64(i), fmt.Sprintf(`{"nickname":"student%c%c"}`, 'a'+i/26, 'a'+i%26)); code != http.StatusCreated {
			t.Fatalf("student %d: sign-up %d", i, code)
		}
		if code := post(h, "/rewards/claim", slash64(i), fmt.Sprintf(`{"accountId":"student-%d"}`, i)); code != http.StatusOK {
			t.Fatalf("student %d: claim %d (one abusive neighbour must not use up the /48)", i, code)
		}
	}
	// The ceiling: 300 claims an hour for the /48, 30 of them the abuser's.
	got := 0
	for i := 250; i < 300; i++ {
		if post(h, "/rewards/claim", slash64(i), fmt.Sprintf(`{"accountId":"student-%d"}`, i)) == http.StatusOK {
			got++
		}
	}
	if got != 20 {
		t.Errorf("%d more claims from the /48 in the hour, want 20 (300 - 250 - the abuser's 30)", got)
	}
}
