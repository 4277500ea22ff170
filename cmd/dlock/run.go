package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// Exit codes of "dlock run", besides its command's own status. They follow
// sysexits.h and the shells, so that they rarely collide with a command's
// own codes; -E and --lost-exit-code change the first two.
const (
	exitLockLost    = 70  // EX_SOFTWARE: the command ran unprotected for a while
	exitNotObtained = 75  // EX_TEMPFAIL: busy; trying again later may succeed
	exitCannotRun   = 126 // the command exists but could not be run (shells use 126)
	exitNotFound    = 127 // no such command (shells use 127)
)

// What --on-lost may say.
const (
	onLostTerminate = "terminate"
	onLostKill      = "kill"
	onLostReport    = "report"
)

// runOptions are the flags of "dlock run".
type runOptions struct {
	wait         time.Duration // with waitSet: give up after this long; 0 at once
	waitSet      bool          // --wait was given; otherwise wait as long as it takes
	noWait       bool
	ttl          time.Duration // 0: the library's default
	minHold      time.Duration // 0: release as the command ends
	permits      int           // 0: a mutex; N: a semaphore of N
	onLost       string
	grace        time.Duration
	conflictCode int
	lostCode     int
	foreground   bool
	ownerInfo    string // "": host, pid and command
	quiet        bool
	verbose      bool
}

func (a *app) runCmd() *cobra.Command {
	o := &runOptions{onLost: onLostTerminate, grace: 5 * time.Second, conflictCode: exitNotObtained, lostCode: exitLockLost}
	cmd := &cobra.Command{
		Use:     "run [flags] NAME -- COMMAND [ARGS...]",
		Short:   "Run a command while holding a lock: a distributed flock",
		Long:    runHelp,
		Example: runExample,
		Args:    runArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.waitSet = cmd.Flags().Changed("wait")
			return a.run(cmd.Context(), o, args[0], args[1:])
		},
	}
	o.addFlags(cmd)
	return cmd
}

// addFlags defines the flags of "dlock run" on cmd.
func (o *runOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.VarP(waitFlag{&o.wait}, "wait", "w", "give up waiting for the lock after this `duration`, or this many seconds (0: at once; default: wait as long as it takes)")
	f.BoolVarP(&o.noWait, "no-wait", "n", false, "fail at once if the lock is held (like --wait 0)")
	f.DurationVar(&o.ttl, "ttl", 0,
		fmt.Sprintf("lock TTL, between %v and %d days: how long a crashed dlock keeps others out; renewed every TTL/3 (0: the library's default, 30s)",
			dlock.MinTTL, dlock.MaxTTL/(24*time.Hour)))
	f.DurationVar(&o.minHold, "min-hold", 0, "keep the lock at least this `duration` after it is taken, even if the command ends sooner, so that hosts whose cron fired moments later skip this run (0: release at once)")
	f.IntVar(&o.permits, "permits", 0, "allow up to `N` runs at once (a semaphore of N permits; the same N in every run of the name) instead of one (0)")
	f.StringVar(&o.onLost, "on-lost", o.onLost, "`action` on the command if the lock is lost: terminate, kill or report")
	f.DurationVar(&o.grace, "grace", o.grace, "with --on-lost terminate, how long to wait after SIGTERM before SIGKILL")
	f.IntVarP(&o.conflictCode, "conflict-exit-code", "E", o.conflictCode, "exit `code` when the lock is not obtained")
	f.IntVar(&o.lostCode, "lost-exit-code", o.lostCode, "exit `code` when the lock is lost while the command runs")
	f.BoolVar(&o.foreground, "foreground", false, "run the command in dlock's process group, for commands that use the terminal")
	f.StringVar(&o.ownerInfo, "owner-info", "", "what \"dlock status\" shows about this holder (default \"host=<hostname> pid=<pid> cmd=<command>\")")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "say nothing when the lock is held elsewhere and not obtained (for cron, which mails every line); the exit code still says so")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "report on stderr when the lock is obtained and released, and what the library logs (such as failures a wait retries)")
}

// runArgs checks for "NAME -- COMMAND [ARGS...]". The -- is required: it
// keeps the command's own flags away from dlock's, wherever they are put.
func runArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash == -1 && len(args) > 1:
		return usageErrorf("put -- between the lock name and the command: dlock run NAME -- %s", strings.Join(args[1:], " "))
	case dash == -1 || len(args) == dash:
		return usageErrorf("no command to run: dlock run NAME -- COMMAND [ARGS...]")
	case dash == 0:
		return usageErrorf("no lock name: dlock run NAME -- COMMAND [ARGS...]")
	case dash != 1:
		return usageErrorf("give exactly one lock name before --, got %q", args[:dash])
	}
	return checkLockName(args[0])
}

func (o *runOptions) validate() error {
	switch {
	case o.noWait && o.waitSet:
		return usageErrorf("--no-wait and --wait exclude each other")
	case o.quiet && o.verbose:
		return usageErrorf("--quiet and --verbose exclude each other")
	case o.wait < 0:
		return usageErrorf("--wait must not be negative, got %v", o.wait)
	case o.minHold != 0 && (o.minHold < dlock.MinTTL || o.minHold > dlock.MaxTTL):
		return usageErrorf("--min-hold must be 0 or between %v and %v, got %v", dlock.MinTTL, dlock.MaxTTL, o.minHold)
	case o.ttl != 0 && (o.ttl < dlock.MinTTL || o.ttl > dlock.MaxTTL):
		return usageErrorf("--ttl must be 0 (the library's default) or between %v and %v, got %v", dlock.MinTTL, dlock.MaxTTL, o.ttl)
	case o.permits < 0 || o.permits > dlock.MaxPermits:
		return usageErrorf("--permits must be between 1 and %d (or 0, the default: a mutex), got %d", dlock.MaxPermits, o.permits)
	case o.onLost != onLostTerminate && o.onLost != onLostKill && o.onLost != onLostReport:
		return usageErrorf("--on-lost must be terminate, kill or report, got %q", o.onLost)
	case o.grace < 0:
		return usageErrorf("--grace must not be negative, got %v", o.grace)
	case o.conflictCode < 0 || o.conflictCode > 255:
		return usageErrorf("--conflict-exit-code must be between 0 and 255, got %d", o.conflictCode)
	case o.lostCode < 0 || o.lostCode > 255:
		return usageErrorf("--lost-exit-code must be between 0 and 255, got %d", o.lostCode)
	case len(o.ownerInfo) > dlock.MaxOwnerInfoLen:
		return usageErrorf("--owner-info must be at most %d bytes", dlock.MaxOwnerInfoLen)
	}
	return nil
}

// run is "dlock run": take the lock, run the command, release the lock.
func (a *app) run(ctx context.Context, o *runOptions, name string, argv []string) error {
	if err := o.validate(); err != nil {
		return err
	}
	// A command that cannot run is found out before taking the lock.
	path, err := exec.LookPath(argv[0])
	if err == nil {
		err = checkInterpreter(path)
	}
	if err != nil {
		return cannotRun(argv[0], err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)

	// Signals are caught from here on: while waiting they end the wait,
	// later they are passed on to the command.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	// As a container's PID 1, dlock is init: it reaps orphans, from the
	// start, as they may come while it waits (from "kubectl exec").
	reap := startReaper()
	defer reap.stop()

	s, err := a.openSession(ctx, false, a.clientOptions(o, argv[0])...)
	if err != nil {
		return err
	}
	defer s.Close()

	h, sig, err := a.acquireForRun(ctx, s.c, o, name, sigs)
	switch {
	case sig != nil:
		return &exitStatus{code: 128 + signalNumber(sig), err: fmt.Errorf("got %s while waiting for %q; the command did not run", signalName(sig), name)}
	case errors.Is(err, dlock.ErrNotObtained) && ctx.Err() == nil && waitFailure(err) != nil:
		// Not contention: Redis failed, or did not answer, until --wait
		// ran out.
		return &exitStatus{code: exitFailure, err: fmt.Errorf("gave up on %q after --wait %v: Redis failed or did not answer while waiting (%s); "+
			"check that the server runs and that the URL is right, then try again", name, o.wait, message(err))}
	case errors.Is(err, dlock.ErrNotObtained) && ctx.Err() == nil && o.quiet:
		return &exitStatus{code: o.conflictCode}
	case errors.Is(err, dlock.ErrNotObtained) && ctx.Err() == nil:
		return &exitStatus{code: o.conflictCode, err: a.notObtained(s.c, o, name)}
	case err != nil:
		return err
	}
	if o.verbose {
		fmt.Fprintf(a.stderr, "dlock: holding %q (fencing token %d)\n", name, h.token)
	}

	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.Env = commandEnv(o, name, h.token)
	cmd.SysProcAttr = commandAttr(!o.foreground)
	cmd.WaitDelay = time.Second // output copied through pipes (tests) may outlive the command
	code, lost, err := a.supervise(cmd, h, o, sigs, reap)
	if err != nil {
		a.release(name, h, o, false)
		if ierr := checkInterpreter(cmd.Path); ierr != nil {
			err = ierr // the script changed since the check: say which file is missing
		}
		return cannotRun(argv[0], err)
	}
	// Released even when lost: a lease lost because Redis could not be
	// reached may still be ours in Redis, and others need not wait a TTL.
	if relLost := a.release(name, h, o, lost != nil); lost == nil {
		lost = relLost
	}
	if lost != nil {
		return &exitStatus{code: o.lostCode, err: fmt.Errorf("exiting with %d: the lock was lost while the command ran (the command exited with status %d)",
			o.lostCode, code)}
	}
	return &exitStatus{code: code}
}

// clientOptions are the library options of a run's Client.
func (a *app) clientOptions(o *runOptions, command string) []dlock.Option {
	info := o.ownerInfo
	if info == "" {
		info = defaultRunOwnerInfo(command)
	}
	opts := []dlock.Option{dlock.WithOwnerInfo(info)}
	if o.minHold != 0 {
		opts = append(opts, dlock.WithMinHold(o.minHold))
	}
	if o.ttl != 0 {
		opts = append(opts, dlock.WithTTL(o.ttl))
	}
	if o.verbose {
		// The library's own account too: above all, the failures a wait
		// retries (a wait without --wait retries them for ever, silently
		// otherwise: a replica's READONLY, a server that is down).
		opts = append(opts, dlock.WithLogger(slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	return opts
}

// commandEnv is the command's environment: dlock's own, with the lock's
// name, the grant's fencing token and, with --permits, the permits.
func commandEnv(o *runOptions, name string, token int64) []string {
	env := append(os.Environ(), "DLOCK_NAME="+name, "DLOCK_TOKEN="+strconv.FormatInt(token, 10))
	if o.permits > 0 {
		return append(env, "DLOCK_PERMITS="+strconv.Itoa(o.permits))
	}
	// Not an outer run's: a run nested in one with --permits holds a lock,
	// not a permit.
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "DLOCK_PERMITS=") })
}
