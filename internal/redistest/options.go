package redistest

import (
	"path/filepath"
	"strconv"
)

// Option configures the servers that Start, StartNodes, StartReplicated,
// StartSentinel and StartCluster launch. Sentinel processes themselves take
// no options.
type Option func(*config)

// config collects the options; the zero value is the default server.
type config struct {
	args        []string
	persistence bool
	password    string
	wrapper     []string
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithArgs appends redis-server command-line arguments, such as
// WithArgs("--maxmemory", "10mb"). They come after the harness's own
// arguments, so they can override them. Default: none.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithPersistence turns on the append-only file with appendfsync always, so
// every acknowledged write survives Kill and Restart. Default: no persistence
// at all (save "" and appendonly no); a restarted server comes back empty.
func WithPersistence() Option {
	return func(c *config) { c.persistence = true }
}

// WithPassword sets requirepass (and masterauth, so replicas can follow a
// master with the same password). Addr-based clients from the harness
// authenticate automatically. Default: no password.
func WithPassword(pw string) Option {
	return func(c *config) { c.password = pw }
}

// WithWrapper runs each data server under a wrapper command: the wrapper's
// argv, then redis-server's path and arguments, as in
// WithWrapper("valgrind", "--tool=callgrind"), which counts the server's
// instructions (the bench module's server-cost measurement). The wrapper
// must run the server in its own process (exec it, as valgrind does), since
// the harness checks that the process it started is the one answering.
// Default: none.
func WithWrapper(argv ...string) Option {
	return func(c *config) { c.wrapper = append([]string(nil), argv...) }
}

// serverArgs returns the full argument list of a data server (master,
// replica or cluster node) on s's current port, followed by extra and then
// by the user's WithArgs.
func (c *config) serverArgs(s *Server, extra ...string) []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no",
		"--protected-mode", "no",
		"--enable-debug-command", "local",
		// No RDB snapshots, ever: tests that want durability use the AOF.
		"--save", "",
		// SIGTERM (Stop) must not wait up to shutdown-timeout for lagging or
		// paused replicas; the AOF is still flushed.
		"--shutdown-on-sigterm", "nosave now",
		// A replica's first sync would otherwise wait 5 s for more replicas.
		"--repl-diskless-sync-delay", "0",
	}
	if c.persistence {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if c.password != "" {
		a = append(a, "--requirepass", c.password, "--masterauth", c.password)
	}
	a = append(a, extra...)
	return append(a, c.args...)
}

// spec describes a data server in dir with extra arguments.
func (c *config) spec(dir string, extra ...string) spec {
	return spec{dir: dir, password: c.password, wrapper: c.wrapper, argv: func(s *Server) []string { return c.serverArgs(s, extra...) }}
}
