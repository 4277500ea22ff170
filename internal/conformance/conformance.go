// Package conformance is the test suite that every way of building a
// dlock.Client must pass: dlock.New over go-redis, and each adapter for
// another Redis client library (adapters/rueidis, adapters/valkey). It drives
// the public API end to end against real redis-server processes from
// internal/redistest, so a driver that pipelines, falls back from EVALSHA to
// EVAL, normalizes replies or delivers pub/sub messages differently from the
// go-redis driver fails here.
//
// A test package runs it with its own constructor:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t testing.TB, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
//			... // a new client library connection pool for srv, closed by t.Cleanup
//			c, err := dlock.NewWithDriver(d, opts...)
//			...
//		})
//	}
//
// Each primitive has its own file with a list of tests (mutex.go, lease.go,
// do.go, list.go); a primitive that lands adds its file and one line to
// groups.
//
// RunDriver is the second half: the driver.Driver contract itself (replies,
// NOSCRIPT inside a pipeline, WAIT on the script's connection, Cluster
// routing, the subscription's confirmation, reconnection and Close), which
// the Client-level tests cannot observe directly.
//
// Two more suites, which every driver runs too, need more than RunDriver's
// factory: RunScanner (the driver's driver.Scanner, and Client.List on a
// Cluster) starts a Cluster of its own, and RunCloseWhileTheServerStops
// (Close while the server stops in the middle of replacing the
// subscription's connection) takes a hook into the library's dials.
package conformance

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// NewClientFunc builds a dlock.Client on srv through the client library
// under test, passing opts to it. Every call must make a new connection pool
// (each Client stands for a separate process) and register, with t.Cleanup,
// the Close of the Client and then of the library's client. It fails t when
// it cannot build the Client.
type NewClientFunc func(t testing.TB, srv *redistest.Server, opts ...dlock.Option) *dlock.Client

// test is one conformance test. run gets its own parallel subtest.
type test struct {
	name string
	run  func(t *testing.T, newClient NewClientFunc)
}

// groups lists each primitive's tests. Subtests are named "<group>/<test>",
// so `go test -run 'Conformance/Mutex/'` runs one group.
var groups = []struct {
	name  string
	tests []test
}{
	{"Mutex", mutexTests},
	{"Lease", leaseTests},
	{"Do", doTests},
	{"List", listTests},
}

// Run runs every conformance test as a parallel subtest of t, with Clients
// from newClient. Tests use the redistest.Shared server with keys of their
// own, and start a server of their own when they inject a fault, so the
// package's TestMain must call redistest.Main (or goleak with
// redistest.Wrap). The suite takes a few seconds.
func Run(t *testing.T, newClient NewClientFunc) {
	for _, g := range groups {
		g := g
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.tests {
				tc := tc
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, newClient)
				})
			}
		})
	}
}
