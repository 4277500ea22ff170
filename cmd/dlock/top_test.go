package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// topLock holds name with owner info "holder" and starts two waiters,
// "waiter-1" then "waiter-2", each on a Client of its own. It returns the
// holder's lease; a waiter granted the lock holds it until the test ends.
func topLock(t *testing.T, srv *redistest.Server, name string) *dlock.Lease {
	t.Helper()
	client := func(info string) *dlock.Client {
		c, err := dlock.New(srv.Client(t), dlock.WithOwnerInfo(info))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder := client("holder")
	l, err := holder.Mutex(name).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, info := range []string{"waiter-1", "waiter-2"} {
		c := client(info)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if wl, err := c.Mutex(name).Lock(ctx); err == nil {
				<-ctx.Done() // holds it until the test ends
				_ = wl.Unlock(context.Background())
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
		waitUntil(t, "waiter queued", func() bool {
			infos, err := holder.Inspect(context.Background(), name)
			return err == nil && len(infos) == 1 && len(infos[0].Waiters) == i+1
		})
	}
	return l
}

func TestTopOnce(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueLockName(t)
	topLock(t, srv, name)
	r := runCLI(t, map[string]string{redisURLEnv: srv.URL()}, "top", "--once", name)
	if r.code != exitOK {
		t.Fatalf("top --once: exit %d", r.code)
	}
	for _, want := range []string{
		`(?m)^KIND +NAME +HOLDER +HELD FOR +TTL +WAITERS +LONGEST WAIT +GRANTS/S$`,
		// "-" while the hold is younger than a third of its TTL.
		`(?m)^mutex +` + regexp.QuoteMeta(name) + ` +holder +(-|[0-9.]+m?s) +[0-9.]+m?s +2 +[0-9.]+m?s +-$`,
		`(?m)^ +waiter 1 +waiter-1 +[0-9.]+m?s$`,
		`(?m)^ +waiter 2 +waiter-2 +[0-9.]+m?s$`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("top --once: output does not match %s:\n%s", want, r.stdout)
		}
	}
	r = runCLI(t, map[string]string{redisURLEnv: srv.URL()}, "top", "--once", name+"-none")
	if r.code != exitOK || r.stdout != "no locks held or waited for\n" {
		t.Errorf("top --once with nothing held: exit %d, stdout %q", r.code, r.stdout)
	}
}

// tmuxPane is a dlock command running in a pane of a tmux server of its own.
type tmuxPane struct {
	t    *testing.T
	sock string
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen returns what the pane shows.
func (p *tmuxPane) screen() string { return p.tmux("capture-pane", "-p", "-t", "top") }

// waitScreen polls the pane until match finds what it wants, and returns
// the screen then.
func (p *tmuxPane) waitScreen(what string, match func(string) bool) string {
	p.t.Helper()
	var s string
	deadline := time.Now().Add(20 * time.Second)
	for s = p.screen(); !match(s); s = p.screen() {
		if time.Now().After(deadline) {
			p.t.Fatalf("the pane does not show %s after 20s:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// startTop runs "dlock top args" in a 120x30 tmux pane, between two saves
// of the terminal's settings (stty -g) into dir, and echoes its exit code.
func startTop(t *testing.T, dir string, env []string, args ...string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (make test installs it)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary is dlock when run by that name (TestMain).
	if err := os.Symlink(exe, filepath.Join(bin, "dlock")); err != nil {
		t.Fatal(err)
	}
	script := "stty -g > before; dlock " + strings.Join(args, " ") + "; echo \"exit=$?\"; stty -g > after; sleep 600"
	p := &tmuxPane{t: t, sock: filepath.Join(dir, "tmux.sock")}
	cmd := []string{"new-session", "-d", "-s", "top", "-x", "120", "-y", "30", "-c", dir,
		"-e", "PATH=" + bin + ":" + os.Getenv("PATH"), "-e", "TERM=xterm-256color"}
	for _, e := range env {
		cmd = append(cmd, "-e", e)
	}
	p.tmux(append(cmd, "sh", "-c", script)...)
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", p.sock, "kill-server").Run() })
	return p
}

// waitedOn returns how long the pane shows that waiter has waited.
func waitedOn(t *testing.T, screen, waiter string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`(?m)waiter \d +` + waiter + ` +([0-9.]+(?:ms|s|m[0-9]+s))\s*$`).FindStringSubmatch(screen)
	if m == nil {
		t.Fatalf("no wait time for %s on the screen:\n%s", waiter, screen)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTopLive(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueLockName(t)
	l := topLock(t, srv, name)
	dir := t.TempDir()
	p := startTop(t, dir, []string{redisURLEnv + "=" + srv.URL()}, "top", "--interval", "300ms", "'"+name+"'")

	holderRow := regexp.MustCompile(`(?m)^mutex +` + regexp.QuoteMeta(name) + ` +(\S+) `)
	first := p.waitScreen("the holder and both waiters", func(s string) bool {
		m := holderRow.FindStringSubmatch(s)
		return m != nil && m[1] == "holder" && strings.Contains(s, "waiter-1") && strings.Contains(s, "waiter-2")
	})
	w1, w2 := waitedOn(t, first, "waiter-1"), waitedOn(t, first, "waiter-2")
	p.waitScreen("wait times that grow", func(s string) bool {
		return strings.Contains(s, "waiter-2") && waitedOn(t, s, "waiter-1") > w1 && waitedOn(t, s, "waiter-2") > w2
	})

	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.waitScreen("waiter-1 holding the lock", func(s string) bool {
		m := holderRow.FindStringSubmatch(s)
		return m != nil && m[1] == "waiter-1"
	})

	p.tmux("resize-window", "-t", "top", "-x", "90", "-y", "20")
	p.waitScreen("a frame redrawn at the new size", func(s string) bool {
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		return len(lines) == 20 && strings.HasPrefix(lines[19], "w wait")
	})
	p.tmux("send-keys", "-t", "top", "C-c")
	p.waitScreen("top's exit", func(s string) bool { return strings.Contains(s, "exit=0") })

	if alt := strings.TrimSpace(p.tmux("display-message", "-p", "-t", "top", "#{alternate_on}")); alt != "0" {
		t.Errorf("after top: alternate screen on = %s, want 0 (left)", alt)
	}
	if cursor := strings.TrimSpace(p.tmux("display-message", "-p", "-t", "top", "#{cursor_flag}")); cursor != "1" {
		t.Errorf("after top: cursor flag = %s, want 1 (shown)", cursor)
	}
	before, err1 := os.ReadFile(filepath.Join(dir, "before"))
	after, err2 := os.ReadFile(filepath.Join(dir, "after"))
	if err1 != nil || err2 != nil || len(before) == 0 || string(before) != string(after) {
		t.Errorf("terminal settings before top %q, after %q (%v, %v): want them restored", before, after, err1, err2)
	}
}
