package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// Where the connection settings come from.
const (
	redisURLEnv              = "REDIS_URL"
	redisPasswordEnv         = "REDIS_PASSWORD"
	redisSentinelPasswordEnv = "REDIS_SENTINEL_PASSWORD"
)

// Default ports when a URL's address has none.
const (
	defaultRedisPort    = "6379"
	defaultSentinelPort = "26379"
)

// urlHelp documents the URL forms, for --help.
const urlHelp = `Every subcommand reaches Redis through --redis URL or the REDIS_URL
environment variable:

  redis://[[user]:password@]host:port[/db]       one server (rediss:// for TLS)
  unix://[[user]:password@]/path/to/socket[?db=N]
  redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]
                                                 the master that these Sentinels
                                                 monitor (rediss+sentinel:// for TLS)
  redis+cluster://[[user]:password@]host:port[,host:port...]
                                                 a Redis Cluster, from any of its
                                                 nodes (rediss+cluster:// for TLS)

A Sentinel or Cluster URL may give further addresses as ?addr=host:port
parameters, and every URL go-redis client options as parameters
(?dial_timeout=3s&pool_size=20).
Passwords need not appear on the command line: a password not in the URL is
read from REDIS_PASSWORD; Sentinels that require a password of their own read
it from REDIS_SENTINEL_PASSWORD.`

// pingTimeout bounds the first PING that checks the server is reachable.
const pingTimeout = 5 * time.Second

func init() {
	// go-redis logs dial failures to os.Stderr through a process-wide
	// logger. dlock reports every error that matters itself, on the
	// writer it was given, so its output stays free of duplicates.
	redis.SetLogger(discardLogger{})
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// connOptions are the connection settings every subcommand shares: the
// persistent --redis flag, and REDIS_URL and REDIS_PASSWORD from the
// environment.
type connOptions struct {
	url    string              // --redis
	getenv func(string) string // os.Getenv, replaced in tests
}

func (o *connOptions) addFlags(root *cobra.Command) {
	root.PersistentFlags().StringVar(&o.url, "redis", "",
		"Redis `URL`: redis://[[user]:password@]host:port[/db], rediss:// for TLS,\n"+
			"redis+sentinel://host:port,.../master, redis+cluster://host:port,... (see dlock --help)\n"+
			"(default $"+redisURLEnv+"; a password not in the URL is read from $"+redisPasswordEnv+")")
}

// target is a resolved Redis deployment: how to make clients for it, and
// what to call it in messages. Close it when done: it stops the embedded
// server, if one was started.
//
// Each call of newClient returns a client with its own connection pool, as
// a separate process would have; the caller closes it. Exactly one of
// standalone, failover and cluster is set: every subcommand works on
// redis.UniversalClient and does not care which.
type target struct {
	desc string // e.g. "Redis at redis://127.0.0.1:6379/0 (from --redis)"

	standalone *redis.Options         // a single server: redis://, rediss://, unix://
	failover   *redis.FailoverOptions // a Sentinel-managed master: redis+sentinel://
	cluster    *redis.ClusterOptions  // a Redis Cluster: redis+cluster://
	embedded   *miniredis.Miniredis   // non-nil when we started it
}

// newClient returns a new client. Options are copied: go-redis keeps and may
// modify the struct it is given.
func (t *target) newClient() redis.UniversalClient {
	switch {
	case t.cluster != nil:
		opts := *t.cluster
		return redis.NewClusterClient(&opts)
	case t.failover != nil:
		opts := *t.failover
		return redis.NewFailoverClient(&opts)
	}
	opts := *t.standalone
	return redis.NewClient(&opts)
}

// newProbeClient is newClient for the reachability check: it tries once,
// so that an unreachable server is reported at once rather than after
// go-redis's retries (20 dial attempts over 2s).
func (t *target) newProbeClient() redis.UniversalClient {
	switch {
	case t.cluster != nil:
		opts := *t.cluster
		opts.MaxRetries, opts.DialerRetries = -1, 1
		return redis.NewClusterClient(&opts)
	case t.failover != nil:
		opts := *t.failover
		opts.MaxRetries, opts.DialerRetries = -1, 1
		return redis.NewFailoverClient(&opts)
	}
	opts := *t.standalone
	opts.MaxRetries, opts.DialerRetries = -1, 1
	return redis.NewClient(&opts)
}

// Close stops the embedded server, if any. Close the clients first.
func (t *target) Close() {
	if t.embedded != nil {
		t.embedded.Close()
	}
}

// errNoServer is returned by open for a command that needs a real server
// when none is configured.
var errNoServer = usageErrorf("no Redis server configured: pass --redis URL or set %s", redisURLEnv)

// open resolves the connection settings into a target and checks that the
// server answers. With no server configured it starts an embedded
// in-process Redis (miniredis) when embedded is true, and returns
// errNoServer otherwise. Mistakes in the settings are usage errors; a
// server that does not answer is a failure.
func (o *connOptions) open(ctx context.Context, embedded bool) (*target, error) {
	t, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if t == nil {
		if !embedded {
			return nil, errNoServer
		}
		return startEmbedded()
	}
	if err := t.ping(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// ping checks that the server answers, so that a wrong address fails at
// once with a clear message instead of in the middle of a command.
func (t *target) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	rdb := t.newProbeClient()
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		hint := "check that the server runs and that the URL is right"
		switch {
		case isAuthError(err):
			hint = "check the password (in the URL, or $" + redisPasswordEnv + ")"
		case t.usesTLS() && isTimeout(err):
			// A plain-text server reads the TLS handshake as the start of
			// a command and waits for the rest: nothing comes back.
			hint = "the URL asks for TLS (rediss://): if the server speaks plain text, use redis://"
		case t.failover != nil && strings.HasSuffix(err.Error(), redis.Nil.Error()):
			// go-redis reports the Sentinels' "no such master" (a nil
			// reply) as their being unreachable, in its message only.
			err = fmt.Errorf("the Sentinels answered, but none monitors a master called %q", t.failover.MasterName)
			hint = "check the master name in the URL"
		}
		return fmt.Errorf("cannot reach %s: %w (%s)", t.desc, err, hint)
	}
	return nil
}

// usesTLS reports whether the URL asked for TLS.
func (t *target) usesTLS() bool {
	switch {
	case t.cluster != nil:
		return t.cluster.TLSConfig != nil
	case t.failover != nil:
		return t.failover.TLSConfig != nil
	case t.standalone != nil:
		return t.standalone.TLSConfig != nil
	}
	return false
}

// isTimeout reports an error of a deadline: the context's, or a network
// timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// isAuthError reports a missing or wrong password, or one the server does
// not expect ("ERR AUTH <password> called without any password configured").
func isAuthError(err error) bool {
	return redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") ||
		strings.HasPrefix(err.Error(), "ERR AUTH")
}

// startEmbedded starts an in-process Redis on a free loopback port.
func startEmbedded() (*target, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("starting the embedded Redis: %w", err)
	}
	// miniredis expires keys only when told to; with ClockTTL their TTLs
	// run with the real clock, as on a real server, so lock TTLs work.
	m.ClockTTL(true)
	return &target{
		desc:       "embedded Redis (miniredis)",
		standalone: &redis.Options{Addr: m.Addr()},
		embedded:   m,
	}, nil
}

// session is what a subcommand that uses locks opens: the target, a go-redis
// client for it and a dlock Client over that. Close closes all three.
type session struct {
	target *target
	rdb    redis.UniversalClient
	c      *dlock.Client
}

// openSession opens the configured target (see connOptions.open) and a
// dlock Client on it with the --key-prefix and opts.
func (a *app) openSession(ctx context.Context, embedded bool, opts ...dlock.Option) (*session, error) {
	t, err := a.conn.open(ctx, embedded)
	if err != nil {
		return nil, err
	}
	rdb := t.newClient()
	c, err := dlock.New(rdb, append([]dlock.Option{dlock.WithKeyPrefix(a.keyPrefix)}, opts...)...)
	if err != nil {
		rdb.Close()
		t.Close()
		return nil, err
	}
	return &session{target: t, rdb: rdb, c: c}, nil
}

// Close closes the dlock Client, the go-redis client and the target.
func (s *session) Close() {
	s.c.Close()
	s.rdb.Close()
	s.target.Close()
}
