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
	// The first signal cancels ctx, with the signal as its cause: the
	// running subcommand stops, cleans up and returns, and run exits with
	// 128 + the signal's number. It also restores the default handling, so
	// a second signal kills a process that is slow to clean up ("dlock run"
	// handles signals itself while its command runs, and forwards them).
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs)
			cancel(interrupted{sig})
		case <-ctx.Done():
			signal.Stop(sigs)
		}
	}()
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// interrupted is the cause of dlockMain's context when a signal ended it.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string { return "interrupted by " + signalName(e.sig) }

// signalName names the signals that interrupt dlock (or a wait of "dlock
// run") as kill(1) does.
func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}
