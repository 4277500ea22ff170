package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestScripts runs the end-to-end scripts in testdata/*.txtar: the real
// dlock command line (this test binary, run as "dlock") against a real
// redis-server, one for all the scripts, which use lock names of their own.
// Besides testscript's commands the scripts have:
//
//	hold [--ignore-term] DIR   the command a lock protects (see holdMain)
//	redis ARGS...              a Redis command on $REDIS_URL; prints the reply
//	waitfile PATH [REGEXP]     waits until PATH exists (and matches REGEXP)
//	waitqueue NAME N           waits until N runs wait for lock NAME
func TestScripts(t *testing.T) {
	srv := redistest.Start(t)
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Setup: func(env *testscript.Env) error {
			env.Setenv(redisURLEnv, srv.URL())
			env.Setenv(redisPasswordEnv, "")
			env.Setenv("GORACE", goraceNoExitSleep())
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"redis":     cmdRedis,
			"waitfile":  cmdWaitFile,
			"waitqueue": cmdWaitQueue,
			"waitgone":  cmdWaitGone,
		},
		RequireExplicitExec: true,
	})
}

// goraceNoExitSleep is $GORACE with atexit_sleep_ms=0: a binary built with
// -race sleeps a second before it exits by default, which every command of
// the scripts would pay.
func goraceNoExitSleep() string {
	return strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
}

// scriptWait bounds the scripts' waits: generous, for loaded machines.
const scriptWait = 30 * time.Second

func scriptClient(ts *testscript.TestScript) *redis.Client {
	opts, err := redis.ParseURL(ts.Getenv(redisURLEnv))
	ts.Check(err)
	return redis.NewClient(opts)
}

// cmdRedis runs a Redis command and prints its reply.
func cmdRedis(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: redis COMMAND [ARGS...]")
	}
	rdb := scriptClient(ts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), scriptWait)
	defer cancel()
	cmdArgs := make([]any, len(args))
	for i, a := range args {
		cmdArgs[i] = a
	}
	v, err := rdb.Do(ctx, cmdArgs...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		ts.Fatalf("redis %v: %v", args, err)
	}
	fmt.Fprintln(ts.Stdout(), v)
}

// cmdWaitFile waits until a file exists and, with a regular expression,
// until its content matches it.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfile PATH [REGEXP]")
	}
	var re *regexp.Regexp
	if len(args) == 2 {
		re = regexp.MustCompile(args[1])
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(scriptWait)
	for {
		b, err := os.ReadFile(path)
		if err == nil && (re == nil || re.Match(b)) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfile %s: still not there (or not matching) after %v; last read: %q, %v", args[0], scriptWait, b, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cmdWaitGone waits until the process whose pid a hold command wrote to
// DIR/pid has ended (a zombie nobody reaps counts as ended: it runs
// nothing).
func cmdWaitGone(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitgone PIDFILE")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[0])))
	ts.Check(err)
	deadline := time.Now().Add(scriptWait)
	for running(pid) {
		if time.Now().After(deadline) {
			ts.Fatalf("waitgone: process %d still running after %v", pid, scriptWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// procState returns the state letter of pid in /proc ('R', 'S', 'T' for
// stopped, 'Z'...), or 0 when it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return '?'
	}
	return s[i+2]
}

// cmdWaitQueue waits until N waiters are queued for the lock NAME (a mutex,
// or a semaphore), as "dlock status" would show them.
func cmdWaitQueue(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitqueue NAME N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	rdb := scriptClient(ts)
	defer rdb.Close()
	c, err := dlock.New(rdb)
	ts.Check(err)
	defer c.Close()
	deadline := time.Now().Add(scriptWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), scriptWait)
		infos, err := c.Inspect(ctx, args[0])
		cancel()
		ts.Check(err)
		n := 0
		for _, info := range infos {
			n += len(info.Waiters)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitqueue %s: %d waiters after %v, want %d", args[0], n, scriptWait, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdMain is the "hold [--ignore-term] DIR" command of the scripts and
// tests: the command that a lock protects. It writes DIR/started, holding
// its $DLOCK_TOKEN (and DIR/pid, its pid, just before), and waits until DIR/stop exists, then exits 0. On
// SIGTERM, SIGINT or SIGHUP it writes the signal to DIR/signal and exits
// with 128 + its number; with --ignore-term it records SIGTERM as ignored
// and goes on waiting, so only SIGKILL ends it early.
func holdMain() int {
	args := os.Args[1:]
	ignoreTerm := len(args) > 0 && args[0] == "--ignore-term"
	if ignoreTerm {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: hold [--ignore-term] DIR")
		return 2
	}
	dir := args[0]
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	write := func(name, content string) {
		// Written whole, then renamed: a waitfile never reads half of it.
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, []byte(content), 0o666); err == nil {
			_ = os.Rename(tmp, filepath.Join(dir, name))
		}
	}
	write("pid", strconv.Itoa(os.Getpid())+"\n")
	write("started", "token="+os.Getenv("DLOCK_TOKEN")+"\n")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case sig := <-sigs:
			s := sig.(syscall.Signal)
			if ignoreTerm && s == syscall.SIGTERM {
				write("signal", "ignored "+s.String()+"\n")
				continue
			}
			write("signal", s.String()+"\n")
			return 128 + int(s)
		case <-tick.C:
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				return 0
			}
		}
	}
}
