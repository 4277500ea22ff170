// Command dlock inspects and exercises dlock's distributed locks on Redis.
//
// Run "dlock --help" for the subcommands. "dlock demo" shows, on an embedded
// Redis or a real server, how concurrent workers oversell a stock without a
// lock and sell it exactly once with one.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(dlockMain()) }

// dlockMain runs the command line of the process and returns its exit code.
// The tests run it as the "dlock" command of their scripts.
func dlockMain() int {
	// The first signal cancels ctx: the running subcommand stops, cleans up
	// and returns its exit code. It also restores the default handling, so a
	// second signal kills a process that is slow to clean up ("dlock run"
	// handles signals itself while its command runs, and forwards them).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}
