// Package redistest starts real redis-server processes for tests and injects
// faults into them. It is the project's only Redis test harness: no mocks.
//
// Every server runs on a free loopback port in its own temporary directory,
// writes its log to a file there, and is stopped by PID when the test that
// started it ends. Ports come from the kernel (listen on 127.0.0.1:0), so the
// parallel test binaries of `go test ./...` do not collide; when two of them
// still race for a port, the loser notices (bind error in its log, or a PING
// answered by somebody else's process) and retries on a new port.
//
// Topologies:
//
//   - [Start]: one server; [StartNodes]: several independent masters (Redlock).
//   - [StartReplicated]: a master with replicas, in sync before it returns.
//   - [StartSentinel]: master, replicas and three sentinels that know each other.
//   - [StartCluster]: a Redis Cluster of masters and replicas.
//   - [Shared]: one server per test binary for tests that inject no faults;
//     [UniqueName] names their keys apart from other runs' (go test -count).
//
// A server or a replicated set starts in tens of milliseconds; a sentinel
// group, a failover and a cluster take seconds (Redis keeps a new cluster
// master out of cluster_state:ok for its first 2 s).
//
// Faults: [Server.Kill], [Server.Pause] and [Server.Resume] (SIGSTOP and
// SIGCONT), [Server.Restart], [Server.FlushScripts], [Cluster.MigrateSlot]
// and [Cluster.StartMigration], and a TCP [Proxy] that delays, blackholes,
// holds replies and resets connections.
//
// # Leaks
//
// The harness leaves no process and no goroutine behind once a test's cleanup
// has run: each server is reaped with wait(2), its output goes to a file (not
// a pipe), and its clients are closed. The one goroutine per running server
// (the one that started it and waits for it, see below) ends when the server
// is reaped. Packages check this with go.uber.org/goleak:
//
//	func TestMain(m *testing.M) {
//		redistest.Main(m) // goleak.VerifyTestMain plus stopping the Shared server
//	}
//
// or, to pass goleak options or compose with other TestMain code:
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(redistest.Wrap(m), goleak.IgnoreCurrent())
//	}
//
// [Shared] fails the test unless TestMain runs through [Main] or [Wrap],
// because only they stop the shared server before goleak looks. They also
// give go-redis's own background goroutines that outlive Close (the pool's
// redial loop after a killed server sleeps 1 s between tries) time to end,
// so packages need no goleak.Ignore options for them.
//
// # Crashed test binaries
//
// On Linux every server is started with Pdeathsig SIGKILL, so it dies with
// the test binary even when the binary crashes or is killed by `go test
// -timeout`. Linux sends that signal when the *thread* that forked the child
// exits, not the process, and the Go runtime ends threads when a goroutine
// locked to one exits. So each server is forked from its own goroutine, locked
// to its own OS thread, that then waits for the server: the thread lives
// exactly as long as the server does.
package redistest
