package driverkit

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/handlergate"
)

// Sharded pub/sub on a Cluster.
//
// SSUBSCRIBE must reach a node that serves the channel's slot, and one
// SSUBSCRIBE may only name channels of a single slot (the library's
// Shard.Dial connection sends one per slot). dlock's channels are lock
// keys, so each lives in its lock's slot. A shardedSubscription keeps one
// subscription, the state machine of subscription.go, per master that
// serves a subscribed channel (PubSub.Route), and places each channel on
// its master's.
//
// When a slot moves to another master, Redis 7 unsubscribes the old
// master's subscribers of the slot's channels, which arrives as an
// "sunsubscribe" nobody asked for; when a connection breaks (a node died,
// a failover), its channels are left without a subscription. In both cases
// the master's subscription hands the channels back (lost) and, for a
// broken connection, retires; a manager goroutine reloads the Cluster's
// state, places the channels again where they live now, and calls Reset
// once the servers confirmed them, because messages published in between
// are lost.
//
// Close stops the Handler calls and closes every master's subscription,
// which returns at once (see subscription). It does not wait for the
// manager, which ends by itself once its current library call returns (a
// reload of the Cluster's state, bounded by the library's timeouts and
// cancelled at Close).
type shardedSubscription struct {
	ps PubSub
	h  *handlergate.Handler // one call at a time, across the masters; none after Close

	life // ends with Close

	mu      sync.Mutex
	masters map[string]*subscription // by Shard.Addr
	wanted  map[string]*subscription // subscribed channels -> their master's; nil while lost
	lostChs map[string]string        // channels to place again -> the master that dropped them ("" for a broken connection)
	started bool                     // the manager runs
	wake    chan struct{}            // capacity 1: lostChs has channels
}

// maxPlaceAttempts bounds the placements of channels whose master's
// subscription retires while they are placed; the manager takes them over
// after that.
const maxPlaceAttempts = 3

func newShardedSubscription(ps PubSub, h *handlergate.Handler) *shardedSubscription {
	return &shardedSubscription{
		ps:      ps,
		h:       h,
		life:    newLife(),
		masters: make(map[string]*subscription),
		wanted:  make(map[string]*subscription),
		lostChs: make(map[string]string),
		wake:    make(chan struct{}, 1),
	}
}

// Subscribe implements driver.Subscription.
func (s *shardedSubscription) Subscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if !s.started {
		s.started = true
		go s.manage()
	}
	for _, ch := range channels {
		if _, ok := s.wanted[ch]; !ok {
			s.wanted[ch] = nil
		}
	}
	s.mu.Unlock()
	return s.place(ctx, channels)
}

// place subscribes channels at the masters that serve them now, as far as
// the client's view of the Cluster knows, and waits for the servers to
// confirm them. Channels unsubscribed meanwhile are skipped.
func (s *shardedSubscription) place(ctx context.Context, channels []string) error {
	groups := make(map[string][]string)
	shards := make(map[string]Shard)
	for _, ch := range channels {
		sh, err := s.ps.Route(ctx, ch)
		if err != nil {
			return err
		}
		groups[sh.Addr] = append(groups[sh.Addr], ch)
		shards[sh.Addr] = sh
	}
	var first error
	for addr, chs := range groups {
		err := s.placeOn(ctx, shards[addr], chs)
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// placeOn subscribes chs on sh's subscription, making one when there is
// none or it retired.
func (s *shardedSubscription) placeOn(ctx context.Context, sh Shard, chs []string) error {
	for try := 1; ; try++ {
		sub, keep, err := s.assign(sh, chs)
		if err != nil || len(keep) == 0 {
			return err
		}
		err = sub.Subscribe(ctx, keep...)
		if err != errRetired {
			return err
		}
		if try == maxPlaceAttempts {
			// Its channels went back before these were in its set.
			s.lost(sub, keep, "")
			return errConnLost
		}
	}
}

// assign returns the subscription of sh's master and those of chs still
// wanted, which are now placed on it.
func (s *shardedSubscription) assign(sh Shard, chs []string) (sub *subscription, keep []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errClosed
	}
	sub = s.masters[sh.Addr]
	if sub == nil || sub.isRetired() {
		sub = newSubscription(sh.Dial, s.h, s.ps.confirmTimeout(), s, sh.Addr)
		s.masters[sh.Addr] = sub
	}
	for _, ch := range chs {
		if _, ok := s.wanted[ch]; ok {
			s.wanted[ch] = sub
			keep = append(keep, ch)
		}
	}
	return sub, keep, nil
}

func (s *subscription) isRetired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retired
}

// Unsubscribe implements driver.Subscription.
func (s *shardedSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	groups := make(map[*subscription][]string)
	s.mu.Lock()
	for _, ch := range channels {
		sub := s.wanted[ch]
		delete(s.wanted, ch)
		delete(s.lostChs, ch)
		if sub != nil {
			groups[sub] = append(groups[sub], ch)
		}
	}
	s.mu.Unlock()
	var first error
	for sub, chs := range groups {
		if err := sub.Unsubscribe(ctx, chs...); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close implements driver.Subscription. From its start no Handler method is
// called any more. It returns at once (see shardedSubscription).
func (s *shardedSubscription) Close() error {
	s.h.Close()
	s.mu.Lock()
	if !s.endLocked() {
		s.mu.Unlock()
		return nil
	}
	masters := s.masters
	s.masters = nil
	s.mu.Unlock()
	for _, sub := range masters {
		_ = sub.Close()
	}
	return nil
}

// lost takes back channels that sub no longer serves: the server dropped
// them from movedFrom, the master their slot left, or sub's connection
// ended ("") and sub retired. The manager places them again.
func (s *shardedSubscription) lost(sub *subscription, channels []string, movedFrom string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if movedFrom == "" && s.masters[sub.addr] == sub {
		delete(s.masters, sub.addr)
	}
	for _, ch := range channels {
		if s.wanted[ch] == sub {
			s.wanted[ch] = nil
			s.lostChs[ch] = movedFrom
		}
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// manage places the channels that lost their subscription again, until
// Close.
func (s *shardedSubscription) manage() {
	pending := make(map[string]string)
	backoff := reconnectBackoff()
	for {
		if len(pending) == 0 {
			select {
			case <-s.wake:
			case <-s.stop:
				return
			}
		}
		s.mu.Lock()
		for ch, from := range s.lostChs {
			pending[ch] = from
		}
		clear(s.lostChs)
		s.mu.Unlock()
		if len(pending) == 0 {
			continue
		}
		if s.resubscribe(pending) {
			clear(pending)
			backoff.Reset()
			s.h.Reset()
			continue
		}
		if !backoff.sleep(s.stop) {
			return
		}
	}
}

// resubscribe places the pending channels that are still wanted where they
// live now, and waits for the servers' confirmation; false if that failed,
// to be tried again.
func (s *shardedSubscription) resubscribe(pending map[string]string) bool {
	ctx, cancel := context.WithTimeout(s.ctx, 2*s.ps.confirmTimeout())
	defer cancel()
	s.refresh(ctx, pending)
	var channels []string
	s.mu.Lock()
	for ch := range pending {
		if _, ok := s.wanted[ch]; ok {
			channels = append(channels, ch)
		}
	}
	s.mu.Unlock()
	return len(channels) == 0 || s.place(ctx, channels) == nil
}

// refresh reloads the client's view of the Cluster, again for a while when
// a channel whose slot moved still maps to the master that dropped it: the
// node asked may not know of the move yet.
func (s *shardedSubscription) refresh(ctx context.Context, pending map[string]string) {
	for try := 0; try < 10; try++ {
		if err := s.ps.Refresh(ctx); err != nil {
			return
		}
		stale := false
		for ch, from := range pending {
			if from == "" {
				continue
			}
			if sh, err := s.ps.Route(ctx, ch); err == nil && sh.Addr == from {
				stale = true
				break
			}
		}
		if !stale || !Sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
}
