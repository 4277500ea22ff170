package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkMutexOptions compares a lock+unlock pair of a Mutex made per call
// with an option against the same option set on the Client, on one
// goroutine: the per-call path should cost no more than the Client's.
func BenchmarkMutexOptions(b *testing.B) {
	srv := redistest.Start(b)
	ttl := dlock.WithTTL(10 * time.Second)
	b.Run("client", func(b *testing.B) {
		c := newClient(b, srv, ttl)
		benchMutexPairs(b, func() *dlock.Mutex { return c.Mutex("bench-opts") })
	})
	b.Run("percall", func(b *testing.B) {
		c := newClient(b, srv)
		benchMutexPairs(b, func() *dlock.Mutex { return c.Mutex("bench-opts", dlock.WithTTL(10*time.Second)) })
	})
	// The descriptor alone, without Redis: what the per-call path adds.
	b.Run("new/client", func(b *testing.B) {
		c := newClient(b, srv, ttl)
		benchNew(b, func() *dlock.Mutex { return c.Mutex("bench-opts") })
	})
	b.Run("new/percall", func(b *testing.B) {
		c := newClient(b, srv)
		benchNew(b, func() *dlock.Mutex { return c.Mutex("bench-opts", dlock.WithTTL(10*time.Second)) })
	})
}

var sink *dlock.Mutex

func benchNew(b *testing.B, mutex func() *dlock.Mutex) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sink = mutex()
	}
}

// benchMutexPairs runs b.N Lock+Unlock pairs, each on a Mutex from mutex.
func benchMutexPairs(b *testing.B, mutex func() *dlock.Mutex) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 100; i++ { // connections dialled, scripts loaded
		pair(b, ctx, mutex())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pair(b, ctx, mutex())
	}
}

func pair(b *testing.B, ctx context.Context, m *dlock.Mutex) {
	l, err := m.Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		b.Fatal(err)
	}
}
