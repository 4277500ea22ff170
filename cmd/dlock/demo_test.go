package main

import (
	"bytes"
	"context"
	"net"
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
	// As main's signal handling would: cancel the context mid-run.
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(300*time.Millisecond, cancel)
	defer timer.Stop()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--redis", srv.URL(), "demo", "--items", "100000", "--work", "10ms"}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	if code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	if !strings.HasPrefix(stderr.String(), "dlock: interrupted") {
		t.Errorf("stderr %q, want it to say the demo was interrupted", &stderr)
	}
	checkNoDemoKeys(t, srv)
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
	if keys := srv.Do(t, "KEYS", "dlock-demo:*"); len(keys.([]any)) != 0 {
		t.Errorf("the demo left keys behind: %v", keys)
	}
}
