// Package bench measures dlock side by side with its peers — go-redsync/redsync,
// bsm/redislock and rueidis' rueidislock — and with a raw go-redis floor
// (SET NX PX to lock, an EVALSHA compare-and-delete to unlock, nothing
// else), on the same real redis-server in the same run.
//
// It is its own module so that the peers and the charting library never
// appear in dlock's go.mod.
//
// Every library is driven through one small adapter, Locker, so every
// scenario runs every library identically:
//
//  1. Uncontended: lock+unlock pairs per second on distinct keys at 1, 8 and
//     64 goroutines sharing one client (also as BenchmarkUncontended, for
//     ns, bytes and allocations per pair). The targets take turns in short
//     windows, so that the machine's drift within a repetition meets them
//     all alike.
//  2. Contended: 16 goroutines across 4 clients competing for one key with
//     a tiny critical section: acquisitions per second, hand-off latency,
//     each goroutine's waits, barging, commands per acquisition, and how
//     long the process stood still (a 1 ms sleep that woke late).
//  3. Waiting load: 1,000 goroutines across 10 clients blocked on one held
//     lock: commands per second while they wait.
//  4. Watchdog scale: 10,000 auto-renewed leases held by one client: round
//     trips, commands and client CPU per renewal period.
//  5. Redlock: scenario 1 at 1 and 8 goroutines and scenario 2, over 3 and
//     5 independent redis-servers (dlock.NewRedlock against redsync); and
//     scenario 1 at one goroutine over 1 and 5 servers behind proxies that
//     add 0.5 ms each way, where the network rather than this machine's
//     CPU sets the pace, to show what the parallel fan-out costs.
//  6. Election (dlock only: no peer offers one): Redis commands and round
//     trips per Campaign+Resign cycle, commands per second while a leader
//     leads, 9 campaigners wait and 10 observers watch, and the hand-off
//     latency from Resign to the next leader's Campaign returning.
//
// dlock's other primitives run scenarios 1 to 3 as well (and
// BenchmarkUncontended): the FairMutex, the ReentrantMutex (a fresh owner
// per Lock call), the RWMutex's write lock, a Semaphore of one permit, a
// MultiLock of two names and the Mutex with its options given per call;
// the RWMutex's read lock and one permit of a Semaphore of eight, which do
// not exclude, run scenario 1 only. The report shows them in a section of
// their own, against the Mutex and the floor, and judges them against the
// family's targets (report_family.go).
//
// `go test ./...` runs only quick sanity checks. `make bench` in the
// repository root counts the server's instructions per pair (below), runs
// the Go benchmarks and then TestReport with -report, which repeats every
// scenario, computes medians, ranges and ratios and writes
// docs/benchmarks.md and its chart, with the two earlier steps' figures
// (-instructions-from, -gobench). TestReport takes more flags after
// -args: -scale and -reps for longer runs, -targets to run only some
// libraries, -render to redo the report from bench/results/results.json.
// To see where a library spends its time, add go test's -cpuprofile:
//
//	go test -run TestReport -cpuprofile cpu.out . -args -report -targets dlock -reps 1 -out /tmp/r
//
// To see what a library costs the server, `make instructions` runs
// TestServerInstructions with -instructions: redis-server under valgrind's
// callgrind, and for each target the instructions the server executes per
// lock+unlock pair. Unlike timings, that count repeats to within about 1%
// on a noisy machine. It also depends on what the server ran before (its
// Lua heap grows with every script loaded), so compare targets within one
// run, as every figure here is compared.
//
// Speed is measured here, never asserted: no test fails because something
// is slow.
package bench
