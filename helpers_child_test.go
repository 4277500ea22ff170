package dlock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// Child worker processes: tests that must kill a holder or a waiter with
// SIGKILL (a goroutine cannot be killed) re-run this test binary as a worker.
// The worker connects to the Redis named in its environment, runs a mode
// registered in childModes, prints "ready" once it holds (or waits for) what
// the mode takes, and then blocks until killed.

const (
	childModeEnv = "DLOCK_TEST_CHILD_MODE"
	childAddrEnv = "DLOCK_TEST_CHILD_REDIS"
	childNameEnv = "DLOCK_TEST_CHILD_NAME"
)

// childMode takes something on c and calls ready once it holds it (or, for
// a waiter, once it is queued); it then returns and the worker blocks.
type childMode func(ctx context.Context, c *dlock.Client, name string, ready func()) error

var (
	childModesMu sync.Mutex
	childModes   = map[string]childMode{}
)

// registerChildMode makes mode available to startChild; call it from init.
func registerChildMode(name string, mode childMode) {
	childModesMu.Lock()
	defer childModesMu.Unlock()
	childModes[name] = mode
}

func init() {
	registerChildMode("mutex-hold", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		_, err := c.Mutex(name, dlock.WithTTL(time.Second)).Lock(ctx)
		if err == nil {
			ready()
		}
		return err
	})
	registerChildMode("mutex-wait", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		go func() { _, _ = c.Mutex(name, dlock.WithWaiterLease(300*time.Millisecond)).Lock(ctx) }()
		ready() // the parent waits for the queue entry itself
		return nil
	})
}

// runChildIfRequested runs the worker when this process was started as one;
// TestMain calls it first.
func runChildIfRequested() {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		return
	}
	childModesMu.Lock()
	f := childModes[mode]
	childModesMu.Unlock()
	if f == nil {
		fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
		os.Exit(2)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childAddrEnv)})
	c, err := dlock.New(rdb)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	if err := f(ctx, c, os.Getenv(childNameEnv), func() { fmt.Println("ready") }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	select {} // hold until killed
}

// child is a running worker process.
type child struct {
	cmd *exec.Cmd
}

// startChild starts a worker in mode on lock name and waits until it is
// ready. The worker is killed at the end of the test if still running.
func startChild(t *testing.T, addr, mode, name string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childAddrEnv+"="+addr, childNameEnv+"="+name)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child: %v", err)
	}
	ch := &child{cmd: cmd}
	t.Cleanup(ch.kill)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if s != "ready" {
			ch.kill()
			t.Fatalf("child %s: %q; stderr: %s", mode, s, stderr.String())
		}
	case <-time.After(30 * time.Second):
		ch.kill()
		t.Fatalf("child %s not ready after 30s; stderr: %s", mode, stderr.String())
	}
	return ch
}

// kill sends SIGKILL and reaps the worker; it is idempotent.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
}
