package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
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
		Use:   "run [flags] NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock: a distributed flock",
		Long: `run takes the lock NAME, runs COMMAND with ARGS while holding it, and exits with
the command's exit status: flock(1) across hosts. The lock is renewed while the
command runs and released when it ends, however it ends. The typical use is a
cron job on several hosts that must run on one of them at a time:

  dlock run nightly-report --no-wait --quiet --min-hold 10m -- /usr/local/bin/report.sh

Waiting: run waits for the lock as long as it takes, in arrival order;
--wait DURATION gives up after DURATION (or a number of seconds, as with
flock -w), --no-wait (or --wait 0) at once; --quiet says nothing then.
With --permits N, up to N runs hold the name at once (a semaphore; each run
takes one permit). The name with --permits is a different lock from the same
name without it: use one or the other for a job, and the same N in every
run of it (N is not stored: each run counts against its own).

The command's environment also has:
  DLOCK_NAME      the lock's name
  DLOCK_TOKEN     this grant's fencing token, larger than every earlier grant's:
                  pass it to what the command writes to, so that a run that
                  lost the lock can be refused
  DLOCK_PERMITS   with --permits, the number of permits N

If the lock is lost while the command runs (Redis unreachable for a whole TTL,
the key deleted, "dlock unlock --force"), run does what --on-lost says:
terminate (SIGTERM, then SIGKILL after --grace, to the processes the command
started too, even when it exits first), kill (SIGKILL at once) or report
(let the command finish); then it exits with 70.

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock
are passed on to the command; dlock waits for it to end, releases the lock,
and exits with the command's status. The command runs in a process group of
its own, so that signals reach every process it started, and a Ctrl-C in a
terminal reaches it once, through dlock. Processes it leaves running in the
background are not waited for. A command in a process group of its own
cannot read from the terminal, though: --foreground keeps it in dlock's
group, for interactive commands. The terminal then sends Ctrl-C (SIGINT,
SIGQUIT) to the command itself, so while dlock is the terminal's foreground
job it passes on only the other signals (SIGTERM reaches the command from
it; without a terminal, or in the background, all of them do), and a lost
lock signals the command but not its children. Each signal
passed on is followed by SIGCONT, as GNU timeout does, so that a stopped
command (one that read the terminal from its own group gets SIGTTIN) still
ends. On Linux the command's own process is killed if dlock itself dies
without cleaning up (SIGKILL, out of memory), since nothing renews the lock
then; processes it started are not (exec the job from a wrapper script).

Containers: as a container's entrypoint (PID 1), or a child subreaper,
dlock also reaps the orphaned processes the kernel hands it, as an init
does. As PID 1, whatever the command leaves running is killed by the
kernel when dlock exits.

Job control: dlock is not suspended while its command runs. A stopped dlock
would not renew the lock, which would expire while the command (in its own
group, not stopped) went on, and another host's run would start beside it.
So Ctrl-Z (SIGTSTP) only prints a note and the command runs on (with
--foreground, dlock continues the command the terminal stopped); Ctrl-C
ends it. SIGTTOU and SIGTTIN are ignored meanwhile.

Exit status:
  N        the command's own; 128+S when a signal S killed it
  75       the lock was not obtained: held elsewhere with --no-wait, or --wait
           expired while it was held (-E/--conflict-exit-code changes it, as
           with flock)
  70       the lock was lost while the command ran (--lost-exit-code changes it)
  126/127  the command (or a script's #! interpreter) could not be run / was
           not found: checked before the lock is taken, and a start that
           fails even so releases the lock at once
  128+S    dlock got signal S while waiting for the lock; the command did not run
  2        invalid command line or lock name, or no Redis server configured
  1        any other error: Redis unreachable, or failing until --wait expired
           (not 75: trying again later succeeds only once Redis is back)`,
		Example: `  dlock run nightly-report --no-wait --quiet --min-hold 10m -- /usr/local/bin/report.sh
  dlock run db-migrate --wait 10m -- ./migrate up
  dlock run thumbnails --permits 4 -- ./render.sh "$file"
  REDIS_URL=rediss://cache.internal:6380 dlock run backup -- sh -c 'pg_dump ... | gzip > "/backups/$DLOCK_TOKEN.gz"'`,
		Args: runArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.waitSet = cmd.Flags().Changed("wait")
			return a.run(cmd.Context(), o, args[0], args[1:])
		},
	}
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
	return cmd
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

// held is what a run holds: a mutex's lease or a semaphore's permits.
type held struct {
	token   int64
	done    <-chan struct{}
	err     func() error
	release func(context.Context) error
}

func leaseHeld(l *dlock.Lease) *held {
	return &held{token: l.Token(), done: l.Done(), err: l.Err, release: l.Unlock}
}

func permitsHeld(p *dlock.Permits) *held {
	return &held{token: p.Token(), done: p.Done(), err: p.Err, release: p.Release}
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

	info := o.ownerInfo
	if info == "" {
		info = defaultRunOwnerInfo(argv[0])
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
	s, err := a.openSession(ctx, false, opts...)
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
	cmd.Env = append(os.Environ(), "DLOCK_NAME="+name, "DLOCK_TOKEN="+strconv.FormatInt(h.token, 10))
	if o.permits > 0 {
		cmd.Env = append(cmd.Env, "DLOCK_PERMITS="+strconv.Itoa(o.permits))
	} else {
		// Not an outer run's: a run nested in one with --permits holds a
		// lock, not a permit.
		cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "DLOCK_PERMITS=") })
	}
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

// cannotRun is the exit status of a command that could not be started: 127
// when it was not found, 126 otherwise, as in shells.
func cannotRun(command string, err error) error {
	code := exitCannotRun
	var bad *badInterpreterError
	if !errors.As(err, &bad) && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)) {
		code = exitNotFound
	}
	return &exitStatus{code: code, err: fmt.Errorf("cannot run %s: %w", command, err)}
}

// badInterpreterError is a script whose #! line names an interpreter that
// cannot be run. The kernel reports it as the script itself missing
// (ENOENT) or not executable; shells say "bad interpreter" and exit 126.
type badInterpreterError struct {
	interp string
	err    error
}

func (e *badInterpreterError) Error() string {
	return fmt.Sprintf("bad interpreter %q (named in its #! line): %v", e.interp, e.err)
}

func (e *badInterpreterError) Unwrap() error { return e.err }

// checkInterpreter returns a *badInterpreterError when the file at path is
// a script whose interpreter does not exist or is not an executable file.
// It reads the #! line as the kernel does: the first 256 bytes at most, the
// interpreter up to the first space or tab (so a "\r" of a DOS line ending
// is part of its name). A file it cannot read is left to the start.
func checkInterpreter(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	line, ok := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !ok {
		return nil
	}
	line, _, _ = bytes.Cut(line, []byte("\n"))
	fields := strings.FieldsFunc(string(line), func(r rune) bool { return r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return nil // no interpreter at all: the start reports it
	}
	interp := fields[0]
	fi, err := os.Stat(interp)
	switch {
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "stat <interp>:" would repeat the name
		}
		return &badInterpreterError{interp: interp, err: err}
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return &badInterpreterError{interp: interp, err: errors.New("not an executable file")}
	}
	return nil
}

// defaultRunOwnerInfo is what "dlock status" shows of a run by default.
func defaultRunOwnerInfo(command string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	info := fmt.Sprintf("host=%s pid=%d cmd=%s", host, os.Getpid(), filepath.Base(command))
	if len(info) > dlock.MaxOwnerInfoLen {
		info = info[:dlock.MaxOwnerInfoLen]
	}
	return info
}

// acquireForRun takes the lock as o says. A signal on sigs ends the wait;
// it is returned, and nothing is held then.
func (a *app) acquireForRun(parent context.Context, c *dlock.Client, o *runOptions, name string, sigs <-chan os.Signal) (*held, os.Signal, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	if o.waitSet && o.wait > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, o.wait)
		defer cancelTimeout()
	}
	var got os.Signal
	stop, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case got = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	h, err := a.acquire(ctx, c, o, name)
	close(stop)
	<-watching
	switch {
	case got == nil && parent.Err() != nil:
		// main cancels parent on SIGINT and SIGTERM, which reach sigs too,
		// from the same delivery but possibly a moment after the wait
		// ended: wait for it, so that the exit status names the signal.
		select {
		case got = <-sigs:
		case <-time.After(time.Second):
		}
	case got == nil:
		select {
		case got = <-sigs: // arrived while the lock was granted
		default:
		}
	}
	if got != nil {
		if h != nil {
			_ = h.release(context.Background())
		}
		return nil, got, nil
	}
	return h, nil, err
}

func (a *app) acquire(ctx context.Context, c *dlock.Client, o *runOptions, name string) (*held, error) {
	wait := !o.noWait && !(o.waitSet && o.wait == 0)
	if o.permits > 0 {
		sem := c.Semaphore(name, o.permits)
		var p *dlock.Permits
		var err error
		if wait {
			p, err = sem.Acquire(ctx, 1)
		} else {
			p, err = sem.TryAcquire(ctx, 1)
		}
		if err != nil {
			return nil, err
		}
		return permitsHeld(p), nil
	}
	m := c.Mutex(name)
	var l *dlock.Lease
	var err error
	if wait {
		l, err = m.Lock(ctx)
	} else {
		l, err = m.TryLock(ctx)
	}
	if err != nil {
		return nil, err
	}
	return leaseHeld(l), nil
}

// waitFailure returns the Redis failure that a wait for the lock ended
// with, or nil when it ended in contention. err matches dlock.ErrNotObtained:
// the library joins into it, next to the context's error, the error of the
// wait's last attempt when that failed (it forgets earlier failures once
// an attempt gets an answer). The context here has no cause of its own, so
// any other error among them is that failure.
func waitFailure(err error) error {
	multi, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if next := errors.Unwrap(err); next != nil {
			return waitFailure(next)
		}
		return nil
	}
	for _, e := range multi.Unwrap() {
		switch {
		case errors.Is(e, context.Canceled), errors.Is(e, context.DeadlineExceeded), errors.Is(e, dlock.ErrClosed):
		case errors.Is(e, dlock.ErrNotObtained):
			if f := waitFailure(e); f != nil {
				return f
			}
		default:
			return e
		}
	}
	return nil
}

// holdersTimeout bounds the Inspect that names a lock's holders after a
// failed attempt: the detail must not hold up --wait's deadline for long.
const holdersTimeout = 300 * time.Millisecond

// notObtained explains why the lock was not obtained, naming its holders.
func (a *app) notObtained(c *dlock.Client, o *runOptions, name string) error {
	how := "not waiting (--no-wait)"
	switch {
	case o.waitSet && o.wait > 0:
		how = fmt.Sprintf("gave up after --wait %v", o.wait)
	case o.waitSet:
		how = "not waiting (--wait 0)"
	}
	kind, what, by := dlock.KindMutex, fmt.Sprintf("%q is held", name), " by "
	if o.permits > 0 {
		kind, what, by = dlock.KindSemaphore, fmt.Sprintf("%q has no free permit (of %d)", name, o.permits), ": held by "
	}
	ctx, cancel := context.WithTimeout(context.Background(), holdersTimeout)
	defer cancel()
	infos, err := c.Inspect(ctx, name)
	if err != nil {
		what += fmt.Sprintf(" (by whom is unknown: %s)", message(err))
	}
	for _, info := range infos {
		if info.Kind == kind && len(info.Holders) > 0 {
			what += by + holderList(info.Holders)
		}
	}
	return fmt.Errorf("%s; %s", what, how)
}

// holderList describes holders in a sentence: "host=a pid=1 (12s left)".
func holderList(holders []dlock.Holder) string {
	var parts []string
	for i, h := range holders {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more", len(holders)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s left)", ownerLabel(h.Owner, h.Info), formatTTL(h.TTL)))
	}
	return strings.Join(parts, ", ")
}

// supervise starts the command and waits for it, passing signals on and
// acting on a lost lock. It returns the command's exit status and the loss,
// or why the command could not be started.
func (a *app) supervise(cmd *exec.Cmd, h *held, o *runOptions, sigs <-chan os.Signal, reap *reaper) (code int, lost error, err error) {
	cmd, exited, err := startCommand(cmd, reap)
	if err != nil {
		return 0, nil, err
	}
	tstp, restore := keepRunning()
	defer restore()
	group := !o.foreground
	done := h.done
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		select {
		case err := <-exited:
			if cmd.ProcessState == nil {
				return 0, lost, err // Wait failed without a status: should not happen
			}
			if graceC != nil && group {
				a.endGroup(cmd, graceC, sigs)
			}
			return exitCodeOf(cmd.ProcessState), lost, nil
		case sig := <-sigs:
			if !group && fromTerminal(sig) {
				continue // the terminal sent it to the command too
			}
			signalCommand(cmd.Process, sig, group)
		case <-tstp:
			// Ctrl-Z: dlock does not stop (see keepRunning). Passing
			// SIGTSTP on instead would suspend the command with the lock
			// held, but the shell, which waits for dlock, would see no
			// stopped job and give no prompt back: nothing but another
			// signal could resume it. Running on, and saying so, is safe.
			fmt.Fprintln(a.stderr, "dlock: not suspending: the lock would expire while the command runs; Ctrl-C ends the command")
			if !group {
				continueOwnGroup() // the terminal stopped the command too
			}
		case <-done:
			done = nil
			lost = fmt.Errorf("%s, while the command ran", message(h.err()))
			switch o.onLost {
			case onLostTerminate:
				fmt.Fprintf(a.stderr, "dlock: %v; sending SIGTERM to the command, SIGKILL in %v\n", lost, o.grace)
				signalCommand(cmd.Process, sigTERM, group)
				grace = time.NewTimer(o.grace)
				graceC = grace.C
			case onLostKill:
				fmt.Fprintf(a.stderr, "dlock: %v; killing the command\n", lost)
				signalCommand(cmd.Process, sigKILL, group)
			default:
				fmt.Fprintf(a.stderr, "dlock: %v; letting the command finish (--on-lost report)\n", lost)
			}
		case <-graceC:
			graceC = nil
			fmt.Fprintf(a.stderr, "dlock: the command is still running %v after SIGTERM; sending SIGKILL\n", o.grace)
			signalCommand(cmd.Process, sigKILL, group)
		}
	}
}

// endGroup is the rest of the grace after a lost lock when the command
// exited within it: processes it started that are still in its group run
// without the lock, so they get what is left of the grace after their
// SIGTERM, then SIGKILL, as the command itself would have. Signals to dlock
// meanwhile go to them.
func (a *app) endGroup(cmd *exec.Cmd, graceC <-chan time.Time, sigs <-chan os.Signal) {
	pid := cmd.Process.Pid
	if !groupAlive(pid) {
		return
	}
	// Processes that got the SIGTERM with the command may be ending right
	// now: they are reported only if they outlive a first look.
	told := false
	tell := func() {
		if !told {
			told = true
			fmt.Fprintln(a.stderr, "dlock: the command exited, but processes it started are still running without the lock; SIGKILL to them when the grace ends")
		}
	}
	tick := time.NewTicker(50 * time.Millisecond) // a group's end signals nothing: look
	defer tick.Stop()
	for {
		select {
		case <-graceC:
			if groupAlive(pid) {
				tell()
				signalCommand(cmd.Process, sigKILL, true)
			}
			return
		case sig := <-sigs:
			signalCommand(cmd.Process, sig, true)
		case <-tick.C:
			if !groupAlive(pid) {
				return
			}
			tell()
		}
	}
}

// startCommand starts cmd from a goroutine locked to an OS thread of its
// own, which then waits for it: the parent-death signal (Linux) is sent
// when the thread that started the command exits, so that thread must live
// as long as the command. The returned channel yields Wait's result for
// the command started: cmd, or, for a file the kernel will not execute (a
// script without a #! line), /bin/sh running it, as execvp(3), flock(1)
// and shells do. reap, when dlock reaps orphans, starts it and is told when
// Wait has reaped it.
func startCommand(cmd *exec.Cmd, reap *reaper) (*exec.Cmd, <-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := reap.start(cmd)
		if sh := shellFallback(cmd, err); sh != nil {
			cmd = sh
			err = reap.start(cmd)
		}
		if err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		// Never unlocked: the thread ends with this goroutine, once the
		// command has exited.
		err = cmd.Wait()
		reap.commandReaped()
		exited <- err
	}()
	if err := <-started; err != nil {
		return cmd, nil, err
	}
	return cmd, exited, nil
}

// release gives the lock up after the command. It returns the loss when
// the lock turned out to have been lost (ErrNotHeld): the command then ran
// unprotected for a while. lostKnown says the loss was told already, while
// the command ran, so it is not told again. A release that fails otherwise
// is only reported: the lock expires within its TTL.
func (a *app) release(name string, h *held, o *runOptions, lostKnown bool) error {
	err := h.release(context.Background()) // bounded by the release timeout
	switch {
	case err == nil:
		if o.verbose {
			fmt.Fprintf(a.stderr, "dlock: released %q\n", name)
		}
		return nil
	case errors.Is(err, dlock.ErrNotHeld):
		// Expired or taken away after the last renewal: the command may
		// have run unprotected at its end.
		lost := fmt.Errorf("%q was lost before the command ended: %s", name, message(err))
		if !lostKnown {
			fmt.Fprintf(a.stderr, "dlock: %v\n", lost)
		}
		return lost
	}
	fmt.Fprintf(a.stderr, "dlock: warning: could not release %q: %s (it expires within its TTL)\n", name, message(err))
	return nil
}
