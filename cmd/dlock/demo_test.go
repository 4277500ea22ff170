package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// small keeps the demo quick under -race on a loaded machine.
var small = []string{"--items", "50", "--workers", "8", "--work", "200us"}

func TestDemoEmbedded(t *testing.T) {
	r := runCLI(t, nil, append([]string{"demo"}, small...)...)
	checkDemoSucceeded(t, r)
	if !strings.Contains(r.stdout, "using embedded Redis (miniredis)") {
		t.Errorf("stdout does not say the embedded Redis is used")
	}
}

func TestDemoRealServer(t *testing.T) {
	srv := redistest.Start(t)
	r := runCLI(t, nil, append([]string{"demo", "--redis", srv.URL()}, small...)...)
	checkDemoSucceeded(t, r)
	if want := "using Redis at " + srv.URL() + " (from --redis)"; !strings.Contains(r.stdout, want) {
		t.Errorf("stdout does not say %q", want)
	}
	checkNoDemoKeys(t, srv)
}

func TestDemoRedisURLEnv(t *testing.T) {
	srv := redistest.Start(t)
	r := runCLI(t, map[string]string{redisURLEnv: srv.URL()}, "demo", "--items", "5", "--workers", "2")
	checkDemoSucceeded(t, r)
	if !strings.Contains(r.stdout, "(from $REDIS_URL)") {
		t.Errorf("stdout does not say the server came from $REDIS_URL")
	}
	checkNoDemoKeys(t, srv)
}

func TestDemoPassword(t *testing.T) {
	const pw = "s3cret"
	srv := redistest.Start(t, redistest.WithPassword(pw))
	bare := "redis://" + srv.Addr()

	r := runCLI(t, map[string]string{redisPasswordEnv: pw}, "--redis", bare, "demo", "--items", "5", "--workers", "2")
	checkDemoSucceeded(t, r)

	r = runCLI(t, nil, "--redis", srv.URL(), "demo", "--items", "5", "--workers", "2")
	checkDemoSucceeded(t, r)
	if strings.Contains(r.stdout+r.stderr, pw) {
		t.Errorf("the output shows the password")
	}

	r = runCLI(t, nil, "--redis", bare, "demo")
	if r.code != exitFailure {
		t.Errorf("without the password: exit %d, want %d", r.code, exitFailure)
	}
	if !strings.Contains(r.stderr, "cannot reach") || !strings.Contains(r.stderr, redisPasswordEnv) {
		t.Errorf("without the password: stderr %q, want it to say the server cannot be reached and mention %s", r.stderr, redisPasswordEnv)
	}
}

func TestDemoUnreachable(t *testing.T) {
	// A port nobody listens on: take a free one and release it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	start := time.Now()
	r := runCLI(t, nil, "--redis", "redis://"+addr, "demo")
	if r.code != exitFailure {
		t.Errorf("exit %d, want %d", r.code, exitFailure)
	}
	if !strings.Contains(r.stderr, "cannot reach Redis at redis://"+addr) {
		t.Errorf("stderr %q, want it to say the server cannot be reached", r.stderr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v to report an unreachable server", d)
	}
}

func TestDemoTimeout(t *testing.T) {
	srv := redistest.Start(t)
	r := runCLI(t, nil, "--redis", srv.URL(), "demo", "--items", "100000", "--work", "10ms", "--timeout", "300ms")
	if r.code != exitFailure {
		t.Errorf("exit %d, want %d", r.code, exitFailure)
	}
	if !strings.Contains(r.stderr, "did not finish within --timeout 300ms") {
		t.Errorf("stderr %q, want it to name the timeout", r.stderr)
	}
	checkNoDemoKeys(t, srv)
}

func TestDemoInterrupted(t *testing.T) {
	srv := redistest.Start(t)
	r := runInterrupted(t, "--redis", srv.URL(), "demo", "--items", "100000", "--work", "10ms")
	if r.code != 130 {
		t.Errorf("exit %d, want 130 (128+SIGINT)", r.code)
	}
	if !strings.HasPrefix(r.stderr, "dlock: the run without a lock: interrupted by SIGINT (") ||
		strings.Count(r.stderr, "interrupted") != 1 {
		t.Errorf("stderr %q, want it to say once that the demo was interrupted", r.stderr)
	}
	checkNoDemoKeys(t, srv)
}

func TestBenchInterrupted(t *testing.T) {
	r := runInterrupted(t, "bench", "--duration", "1m", "--goroutines", "2", "--clients", "1")
	if r.code != 130 {
		t.Errorf("exit %d, want 130 (128+SIGINT)", r.code)
	}
	if !regexp.MustCompile(`^dlock: the benchmark stopped after [0-9.]+m?s: interrupted by SIGINT\n$`).MatchString(r.stderr) {
		t.Errorf("stderr %q, want it to say once that the benchmark was interrupted", r.stderr)
	}
}

// runInterrupted runs the command line in-process and cancels it a second
// later, as main does on SIGINT.
func runInterrupted(t *testing.T, args ...string) result {
	t.Helper()
	t.Setenv(redisURLEnv, "")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	timer := time.AfterFunc(time.Second, func() { cancel(interrupted{os.Interrupt}) })
	defer timer.Stop()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	t.Logf("dlock %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// TestDemoAndBenchKeyPrefix runs demo and bench with a --key-prefix that
// holds glob characters: every key they write is under it, and they delete
// them all.
func TestDemoAndBenchKeyPrefix(t *testing.T) {
	srv := redistest.Start(t)
	const prefix = "t[1]*:"
	keys := keysWritten(t, srv, func() {
		r := runCLI(t, nil, "--redis", srv.URL(), "--key-prefix", prefix, "demo", "--items", "5", "--workers", "2")
		checkDemoSucceeded(t, r)
		r = runCLI(t, nil, "--redis", srv.URL(), "--key-prefix", prefix, "bench", "--duration", "200ms", "--goroutines", "2", "--clients", "1")
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("bench: exit %d, stderr %q", r.code, r.stderr)
		}
	})
	var demo, bench int
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, prefix+"demo:"):
			demo++
		case strings.HasPrefix(k, prefix+"bench:"):
			bench++
		default:
			t.Errorf("key %q is not under --key-prefix %q and a sub-namespace of demo or bench", k, prefix)
		}
	}
	if demo == 0 || bench == 0 {
		t.Errorf("%d keys written by demo and %d by bench, want some of each", demo, bench)
	}
	if n := srv.Do(t, "DBSIZE"); n != int64(1) { // keysWritten's marker
		t.Errorf("%d keys left, want only the marker: %v", n, srv.Do(t, "KEYS", "*"))
	}
}

// keysWritten runs f and returns every key written meanwhile, as the
// server's keyspace notifications report them.
func keysWritten(t *testing.T, srv *redistest.Server, f func()) []string {
	t.Helper()
	srv.Do(t, "CONFIG", "SET", "notify-keyspace-events", "KA")
	ctx := context.Background()
	ps := srv.Client(t).PSubscribe(ctx, "__keyspace@0__:*")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	f()
	// Notifications arrive in order: once the marker's has, all of f's have.
	marker := fmt.Sprintf("keys-written-marker-%d", time.Now().UnixNano())
	srv.Do(t, "SET", marker, "1")
	var keys []string
	ch := ps.Channel()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-ch:
			key := strings.TrimPrefix(m.Channel, "__keyspace@0__:")
			if key == marker {
				return keys
			}
			keys = append(keys, key)
		case <-timeout:
			t.Fatalf("no notification for the marker key after 30s")
		}
	}
}

// checkDemoSucceeded checks the exit code and the report of a demo run:
// nothing oversold with the lock, tokens strictly increasing.
func checkDemoSucceeded(t *testing.T, r result) {
	t.Helper()
	if r.code != exitOK {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitOK, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing", r.stderr)
	}
	if got := tableRow(t, r.stdout, "oversold"); len(got) != 2 || got[1] != "0" {
		t.Errorf("oversold row %q, want 0 oversold in the dlock column", got)
	}
	if got := tableRow(t, r.stdout, "final stock"); len(got) != 2 || got[1] != "0" {
		t.Errorf("final stock row %q, want 0 in the dlock column", got)
	}
	if tokens := strings.Join(tableRow(t, r.stdout, "fencing tokens"), " "); !strings.Contains(tokens, "strictly increasing") ||
		strings.Contains(tokens, "NOT") {
		t.Errorf("fencing tokens %q, want strictly increasing", tokens)
	}
	if !strings.Contains(r.stdout, "every item was sold exactly once") {
		t.Errorf("stdout does not give the verdict")
	}
}

// tableRow returns the columns after the label of the report row label.
func tableRow(t *testing.T, out, label string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, label+" "); ok {
			return strings.Fields(rest)
		}
	}
	t.Errorf("no %q row in the report", label)
	return nil
}

// checkNoDemoKeys checks that the demo deleted every key it wrote.
func checkNoDemoKeys(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if keys := srv.Do(t, "KEYS", "dlock:demo:*"); len(keys.([]any)) != 0 {
		t.Errorf("the demo left keys behind: %v", keys)
	}
}
