package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// Run as "dlock" or "hold" by the scripts, this binary is that command;
	// otherwise it runs the tests, then looks for leaked goroutines.
	os.Exit(testscript.RunMain(leakChecked{m}, testCommands))
}

// testCommands are the commands this binary is when run by those names
// (testscript.RunMain puts them in $PATH). Tests for one platform add theirs.
var testCommands = map[string]func() int{
	"dlock": dlockMain,
	"hold":  holdMain,
}

// leakChecked runs the tests as redistest.Main does: stopping the shared
// server, then failing on leaked goroutines.
type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	code := redistest.Wrap(l.m).Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on a successful test run: %v\n", err)
			return 1
		}
	}
	return code
}

// result is what one run of the command line produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line in-process with a 1-minute limit, and with
// REDIS_URL and REDIS_PASSWORD cleared unless env sets them, so that the
// developer's environment does not leak in.
func runCLI(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	for _, name := range []string{redisURLEnv, redisPasswordEnv} {
		t.Setenv(name, env[name])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("dlock %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}, {"help", "demo"}} {
		r := runCLI(t, nil, args...)
		if r.code != exitOK {
			t.Errorf("dlock %v: exit %d, want %d", args, r.code, exitOK)
		}
		if r.stderr != "" {
			t.Errorf("dlock %v wrote to stderr: %q", args, r.stderr)
		}
		want := []string{"--redis", "REDIS_URL", "REDIS_PASSWORD"}
		if args[0] != "--help" {
			want = append(want, "--items", "--workers", "--work", "--ttl", "--timeout")
		} else {
			want = append(want, "demo")
		}
		for _, w := range want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("dlock %v: the help does not mention %s", args, w)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"demo", "--items", "0"}, "--items must be at least 1"},
		{[]string{"demo", "--items", "-3"}, "--items must be at least 1"},
		{[]string{"demo", "--workers", "0"}, "--workers must be between 1 and"},
		{[]string{"demo", "--workers", "100000"}, "--workers must be between 1 and"},
		{[]string{"demo", "--work", "-1ms"}, "--work must not be negative"},
		{[]string{"demo", "--ttl", "1ns"}, "--ttl must be 0"},
		{[]string{"demo", "--timeout", "0"}, "--timeout must be positive"},
		{[]string{"demo", "--items", "many"}, `invalid argument "many" for "--items"`},
		{[]string{"demo", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"demo", "extra"}, "takes no arguments"},
		{[]string{"demoo"}, `unknown command "demoo"`},
		{[]string{"--redis", "http://localhost:6379", "demo"}, `unsupported scheme "http"`},
		{[]string{"--redis", "redis://[::1", "demo"}, "--redis is not a valid URL"},
		{[]string{"--redis", "127.0.0.1:6379", "demo"}, `--redis "127.0.0.1:6379" is an address, not a URL: write redis://127.0.0.1:6379`},
		{[]string{"--key-prefix", "{x", "demo"}, `--key-prefix "{x" must not contain '{' or '}'`},
		{[]string{"--key-prefix", "x}", "bench"}, `--key-prefix "x}" must not contain '{' or '}'`},
		{[]string{"help", "bogus"}, `unknown help topic "bogus"`},
		{[]string{"ls", "["}, `pattern "[": the "[" at byte 1 opens a class that no "]" closes`},
		{[]string{"ls", `a\[b[c\]`}, `the "[" at byte 5 opens a class`},
		{[]string{"run", "x", "--permits", "-1", "--", "true"}, "--permits must be between 1 and 2147483647 (or 0, the default: a mutex), got -1"},
		// Names are checked before connecting: the server here is unreachable.
		{[]string{"--redis", "redis://127.0.0.1:1", "run", "", "--", "true"}, "empty lock name"},
		{[]string{"--redis", "redis://127.0.0.1:1", "status", "}x"}, `lock name "}x" starts with '}'`},
		{[]string{"--redis", "redis://127.0.0.1:1", "unlock", "--force", strings.Repeat("n", 1025)}, "lock name of 1025 bytes is longer than 1024"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--key-prefix", "{", "ls"}, "--key-prefix"},
	}
	for _, tt := range tests {
		r := runCLI(t, nil, tt.args...)
		if r.code != exitUsage {
			t.Errorf("dlock %v: exit %d, want %d", tt.args, r.code, exitUsage)
		}
		if !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "--help' for usage") {
			t.Errorf("dlock %v: stderr %q, want it to contain %q and point to --help", tt.args, r.stderr, tt.want)
		}
	}
}

func TestMessage(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{errors.New("plain"), "plain"},
		{fmt.Errorf("dlock: Mutex: %w", fmt.Errorf("%w: empty lock name", dlock.ErrInvalidArgument)), "Mutex: invalid argument: empty lock name"},
		{fmt.Errorf("dlock: Inspect %q: %w: a list", "bad", dlock.ErrKeyConflict), `Inspect "bad": key conflict: a list`},
		{errors.Join(dlock.ErrClosed, errors.New(`dlock: "x" not obtained; last error: dlock: boom (dlock: inner)`)),
			"client closed\n\"x\" not obtained; last error: boom (inner)"},
	}
	for _, tt := range tests {
		if got := message(tt.err); got != tt.want {
			t.Errorf("message(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestUsageErrorHidesPassword(t *testing.T) {
	r := runCLI(t, nil, "--redis", "http://user:s3cret@localhost:6379", "demo")
	if r.code != exitUsage {
		t.Errorf("exit %d, want %d", r.code, exitUsage)
	}
	if strings.Contains(r.stderr, "s3cret") {
		t.Errorf("stderr shows the password: %q", r.stderr)
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name     string
		flag     string
		env      map[string]string
		wantAddr string
		wantPass string
		wantDB   int
		wantTLS  bool
		wantDesc string // in desc
		hidden   string // must not be in desc
	}{
		{name: "flag", flag: "redis://10.0.0.1:6380/2",
			wantAddr: "10.0.0.1:6380", wantDB: 2, wantDesc: "redis://10.0.0.1:6380/2 (from --redis)"},
		{name: "env", env: map[string]string{redisURLEnv: "redis://10.0.0.1:6380"},
			wantAddr: "10.0.0.1:6380", wantDesc: "(from $REDIS_URL)"},
		{name: "flag wins over env", flag: "redis://a:1", env: map[string]string{redisURLEnv: "redis://b:2"},
			wantAddr: "a:1", wantDesc: "(from --redis)"},
		{name: "tls", flag: "rediss://cache.example:6380",
			wantAddr: "cache.example:6380", wantTLS: true},
		{name: "password from env", flag: "redis://h:1", env: map[string]string{redisPasswordEnv: "envpw"},
			wantAddr: "h:1", wantPass: "envpw"},
		{name: "URL password wins", flag: "redis://:urlpw@h:1", env: map[string]string{redisPasswordEnv: "envpw"},
			wantAddr: "h:1", wantPass: "urlpw", hidden: "urlpw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := connOptions{url: tt.flag, getenv: func(k string) string { return tt.env[k] }}
			tg, err := o.resolve()
			if err != nil {
				t.Fatalf("resolve: %v", err)
			}
			opts := tg.standalone
			if opts.Addr != tt.wantAddr || opts.Password != tt.wantPass || opts.DB != tt.wantDB || (opts.TLSConfig != nil) != tt.wantTLS {
				t.Errorf("addr %q password %q db %d tls %v, want %q %q %d %v",
					opts.Addr, opts.Password, opts.DB, opts.TLSConfig != nil, tt.wantAddr, tt.wantPass, tt.wantDB, tt.wantTLS)
			}
			if !strings.Contains(tg.desc, tt.wantDesc) {
				t.Errorf("desc %q, want it to contain %q", tg.desc, tt.wantDesc)
			}
			if tt.hidden != "" && strings.Contains(tg.desc, tt.hidden) {
				t.Errorf("desc %q shows the password", tg.desc)
			}
		})
	}

	o := connOptions{getenv: func(string) string { return "" }}
	if tg, err := o.resolve(); tg != nil || err != nil {
		t.Errorf("resolve with nothing configured = %v, %v; want nil, nil", tg, err)
	}
	if _, err := o.open(context.Background(), false); err != errNoServer {
		t.Errorf("open without a server or the embedded one: %v, want errNoServer", err)
	}
}

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond // reversed: percentile sorts
	}
	tests := []struct {
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ds[:1], 0.99, 100 * time.Millisecond},
		{ds, 0.50, 50 * time.Millisecond},
		{ds, 0.99, 99 * time.Millisecond},
		{ds, 1, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.ds, tt.p); got != tt.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(tt.ds), tt.p, got, tt.want)
		}
	}
}

// uniqueLockName is a lock name of the test's own, apart from other runs'.
func uniqueLockName(t *testing.T) string { return redistest.UniqueName(t) }

// inspector returns a dlock Client to look at srv's locks.
func inspector(t *testing.T, srv *redistest.Server) *dlock.Client {
	c, err := dlock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitUntil polls cond until it holds, failing the test after 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
