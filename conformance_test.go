package dlock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/conformance"
	"github.com/dlock-go/dlock/internal/goredis"
)

// TestConformance runs the suite every driver must pass over the built-in
// go-redis driver. The adapter modules run it over their client libraries.
func TestConformance(t *testing.T) {
	conformance.Run(t, newClient)
}

// TestDriverConformance runs the driver-level suite over the go-redis driver.
func TestDriverConformance(t *testing.T) {
	conformance.RunDriver(t, func(t testing.TB, target conformance.Target) driver.Driver {
		if target.Cluster {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: target.Addrs, Password: target.Password})
			t.Cleanup(func() { _ = rdb.Close() })
			return goredis.New(rdb)
		}
		rdb := redis.NewClient(&redis.Options{Addr: target.Addrs[0], Password: target.Password})
		t.Cleanup(func() { _ = rdb.Close() })
		return goredis.New(rdb)
	})
}
