package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// Where the connection settings come from.
const (
	redisURLEnv      = "REDIS_URL"
	redisPasswordEnv = "REDIS_PASSWORD"
)

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
		"Redis server `URL`: redis://[[user]:password@]host:port[/db], or rediss://... for TLS\n"+
			"(default $"+redisURLEnv+"; a password not in the URL is read from $"+redisPasswordEnv+")")
}

// target is a resolved Redis deployment: how to make clients for it, and
// what to call it in messages. Close it when done: it stops the embedded
// server, if one was started.
//
// Each call of newClient returns a client with its own connection pool, as
// a separate process would have; the caller closes it. The kinds of
// deployment differ only in how newClient builds a client: a Cluster
// target (redis.ParseClusterURL, redis.NewClusterClient) or a Sentinel one
// (redis.NewFailoverClient) is another case in resolve and newClient, and
// every subcommand keeps working on redis.UniversalClient.
type target struct {
	desc string // e.g. "Redis at redis://127.0.0.1:6379/0 (from --redis)"

	standalone *redis.Options       // a single server: redis://, rediss://, unix://
	embedded   *miniredis.Miniredis // non-nil when we started it
}

func (t *target) newClient() redis.UniversalClient {
	// Options are copied: go-redis keeps and may modify the struct it is
	// given.
	opts := *t.standalone
	return redis.NewClient(&opts)
}

// newProbeClient is newClient for the reachability check: it tries once,
// so that an unreachable server is reported at once rather than after
// go-redis's retries (20 dial attempts over 2s).
func (t *target) newProbeClient() redis.UniversalClient {
	opts := *t.standalone
	opts.MaxRetries = -1
	opts.DialerRetries = 1
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

// resolve turns the settings into a target without sending anything. It
// returns nil, nil when no server is configured.
func (o *connOptions) resolve() (*target, error) {
	raw, source := o.url, "--redis"
	if raw == "" {
		raw, source = o.getenv(redisURLEnv), "$"+redisURLEnv
	}
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's message quotes the whole URL, which may hold a password.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, usageErrorf("%s is not a valid URL: %v", source, err)
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return nil, usageErrorf("%s: unsupported scheme %q in %s: use redis://host:port, or rediss://host:port for TLS",
			source, u.Scheme, u.Redacted())
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, usageErrorf("%s: %s: %v", source, u.Redacted(), err)
	}
	// The URL's own password wins: it is the more specific setting.
	if opts.Password == "" {
		opts.Password = o.getenv(redisPasswordEnv)
	}
	return &target{
		desc:       fmt.Sprintf("Redis at %s (from %s)", u.Redacted(), source),
		standalone: opts,
	}, nil
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
		if isAuthError(err) {
			hint = "check the password (in the URL, or $" + redisPasswordEnv + ")"
		}
		return fmt.Errorf("cannot reach %s: %w (%s)", t.desc, err, hint)
	}
	return nil
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
