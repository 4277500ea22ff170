package hold

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// nestHost is a parent's Host that counts Unnested calls.
type nestHost struct {
	testHost
	unnested int
}

func (h *nestHost) Unnested() { h.unnested++ }

// newNestParent returns a tracked parent lease, renewed in an hour, with
// kids nested holds adopted.
func newNestParent(t *testing.T, wd *Watchdog, host Host, kids ...*Lease) *Lease {
	t.Helper()
	p := new(Lease)
	p.Start(wd, host, "owner", Settings{TTL: time.Hour, AutoRenew: true}, time.Now(), time.Hour)
	if err := p.Track(); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		k.Init(wd, testHost{}, "hold", Settings{TTL: time.Hour}, p)
		if !k.Adopt() {
			t.Fatal("a live parent refused a nested hold")
		}
	}
	return p
}

// A parent's renewals pause while every hold it counts is being released,
// resume when a release leaves one that is not, and the last hold to end
// ends the parent, which then adopts nothing more.
func TestNestPausesResumesAndEndsTheParent(t *testing.T) {
	wd := NewWatchdog(nil)
	defer wd.Close()
	ctx := context.Background()
	host := &nestHost{}
	var a, b, c Lease
	p := newNestParent(t, wd, host, &a, &b)
	watched := func(want int, when string) {
		t.Helper()
		if n := wd.Counts().Leases; n != want {
			t.Errorf("%s: the Watchdog watches %d leases, want %d", when, n, want)
		}
	}
	watched(1, "two holds")
	if err := a.BeginUnlock(ctx, false); err != nil || a.ReleasesLast() {
		t.Fatalf("first release: %v, last %v; want nil, false", err, a.ReleasesLast())
	}
	watched(1, "one of two holds being released")
	if err := b.BeginUnlock(ctx, false); err != nil || !b.ReleasesLast() {
		t.Fatalf("second release: %v, last %v; want nil, true", err, b.ReleasesLast())
	}
	watched(0, "both holds being released")
	a.EndUnlock(nil)
	watched(0, "the other hold still being released")
	c.Init(wd, testHost{}, "hold", Settings{TTL: time.Hour}, p)
	if !c.Adopt() {
		t.Fatal("a paused parent refused a nested hold")
	}
	b.EndUnlock(errors.New("no answer")) // may not have landed
	watched(1, "a failed release and a hold not being released")
	if err := b.Err(); !errors.Is(err, errs.ErrLockLost) || !strings.Contains(err.Error(), "releasing it failed") {
		t.Errorf("the failed release's hold: Err = %v, want its own failure", err)
	}
	if err := p.Err(); err != nil || host.unnested != 0 {
		t.Fatalf("the parent with a hold left: Err = %v, %d Unnested", err, host.unnested)
	}
	if err := c.BeginUnlock(ctx, false); err != nil || !c.ReleasesLast() {
		t.Fatalf("last release: %v, last %v; want nil, true", err, c.ReleasesLast())
	}
	c.EndUnlock(nil)
	watched(0, "every hold released")
	if err := p.Err(); !errors.Is(err, ErrReleased) || host.unnested != 1 {
		t.Errorf("the parent after its last hold: Err = %v, %d Unnested; want released, 1", err, host.unnested)
	}
	var d Lease
	d.Init(wd, testHost{}, "hold", Settings{TTL: time.Hour}, p)
	if d.Adopt() {
		t.Error("an ended parent adopted a nested hold")
	}
}

// The parent's loss is every adopted hold's, one being released included;
// a hold released afterwards leaves the lost parent as it is.
func TestNestLossReachesEveryHold(t *testing.T) {
	wd := NewWatchdog(nil)
	defer wd.Close()
	var a, b Lease
	p := newNestParent(t, wd, testHost{}, &a, &b)
	if err := a.BeginUnlock(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	p.Lose("test loss")
	for i, k := range []*Lease{&a, &b} {
		if err := k.Err(); !errors.Is(err, errs.ErrLockLost) || !strings.Contains(err.Error(), "the owner's hold ended") {
			t.Errorf("hold %d: Err = %v, want the parent's loss", i, err)
		}
		select {
		case <-k.Done():
		default:
			t.Errorf("hold %d: Done open after the parent's loss", i)
		}
	}
	a.EndUnlock(nil)
	if err := p.Err(); !errors.Is(err, errs.ErrLockLost) {
		t.Errorf("the lost parent after a release: Err = %v", err)
	}
	var c Lease
	c.Init(wd, testHost{}, "hold", Settings{TTL: time.Hour}, p)
	if c.Adopt() {
		t.Error("a lost parent adopted a nested hold")
	}
}

// The owner's last release waits for the parent's renewal in flight; when
// its time runs out first, nothing is released: the hold ends lost and so
// does the parent, which nothing renews any more.
func TestNestLastReleaseWaitsForTheParentsRenewal(t *testing.T) {
	wd := NewWatchdog(nil)
	defer wd.Close()
	var a Lease
	p := newNestParent(t, wd, testHost{}, &a)
	renewing := make(chan struct{})
	wd.mu.Lock()
	p.renewing = renewing // as a renewal batch marks a lease it sends
	wd.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := a.BeginUnlock(ctx, false)
	if !IsRenewalPending(err) {
		t.Fatalf("BeginUnlock with the parent's renewal in flight = %v, want a pending renewal", err)
	}
	if err := a.Err(); !errors.Is(err, errs.ErrLockLost) || !strings.Contains(err.Error(), "Unlock gave up") {
		t.Errorf("the hold: Err = %v, want Unlock's give-up", err)
	}
	if err := p.Err(); !errors.Is(err, errs.ErrLockLost) {
		t.Errorf("the parent: Err = %v, want lost with its last hold's failed release", err)
	}
	wd.mu.Lock()
	p.renewing = nil
	wd.mu.Unlock()
	close(renewing)

	// A renewal that returns lets the release go.
	var b Lease
	q := newNestParent(t, wd, testHost{}, &b)
	renewing = make(chan struct{})
	wd.mu.Lock()
	q.renewing = renewing
	wd.mu.Unlock()
	begun := make(chan error, 1)
	go func() { begun <- b.BeginUnlock(context.Background(), false) }()
	wd.mu.Lock()
	q.renewing = nil
	wd.mu.Unlock()
	close(renewing)
	if err := <-begun; err != nil || !b.ReleasesLast() {
		t.Fatalf("BeginUnlock after the renewal returned = %v, last %v", err, b.ReleasesLast())
	}
	b.EndUnlock(nil)
	if err := q.Err(); !errors.Is(err, ErrReleased) {
		t.Errorf("the parent after its last hold: Err = %v, want released", err)
	}
}
