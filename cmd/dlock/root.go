package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// Exit codes. Every subcommand also exits with 128+S when signal S
// interrupts it (130 for Ctrl-C), as shells report a command a signal
// killed.
const (
	exitOK      = 0 // success
	exitFailure = 1 // the command ran and failed: Redis unreachable, a check failed
	exitUsage   = 2 // the command line is wrong: unknown command or flag, invalid value
)

// app is what every subcommand shares: where its input and output go, how
// it reaches Redis and the key prefix of the locks. Subcommands use only
// these, never os.Stdin or os.Stdout, so tests can run them in-process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	conn           connOptions
	keyPrefix      string // --key-prefix
}

// run runs the dlock command line args (without the program name) and
// returns the process exit code. ctx ends the command early: main cancels
// it on SIGINT and SIGTERM, with an interrupted error as its cause.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdin: os.Stdin, stdout: stdout, stderr: stderr, conn: connOptions{getenv: os.Getenv}}
	root := a.rootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var status *exitStatus
	if errors.As(err, &status) {
		if status.err != nil {
			fmt.Fprintf(stderr, "dlock: %s\n", message(status.err))
		}
		return status.code
	}
	var fail *failure
	if !errors.As(err, &fail) {
		// Everything cobra rejects, and every usageError a subcommand
		// returns, is a mistake in the command line.
		fmt.Fprintf(stderr, "dlock: %s\nRun '%s --help' for usage.\n", message(err), cmd.CommandPath())
		return exitUsage
	}
	if ctx.Err() == nil {
		fmt.Fprintf(stderr, "dlock: %s\n", message(fail.err))
		return exitFailure
	}
	// Interrupted: whatever failed then is a consequence. The subcommand
	// may have said so already, with ctx's cause; otherwise say it here.
	cause := context.Cause(ctx)
	msg := message(fail.err)
	var intr interrupted
	switch {
	case !errors.As(cause, &intr):
		// Cancelled by a caller of run (tests), not by a signal.
		fmt.Fprintf(stderr, "dlock: interrupted: %s\n", msg)
		return exitFailure
	case !errors.Is(fail.err, cause):
		msg = message(cause) + ": " + msg
	}
	fmt.Fprintf(stderr, "dlock: %s\n", msg)
	return 128 + signalNumber(intr.sig)
}

// message returns err's text without the "dlock: " that the library puts
// at every level of its errors ("dlock: Inspect \"x\": dlock: key
// conflict: ..."), so that run prints each error once, after a single
// "dlock: " of its own.
func message(err error) string {
	s := strings.TrimPrefix(err.Error(), "dlock: ")
	for _, sep := range []string{": ", "; ", "(", "\n"} {
		s = strings.ReplaceAll(s, sep+"dlock: ", sep)
	}
	return s
}

// rootCmd builds the command tree. A subcommand lives in its own file, with
// its own options struct and a constructor a.<name>Cmd() added here.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks on Redis: try them, inspect them",
		Long: `dlock is the command line of github.com/dlock-go/dlock, distributed locks on Redis:
run a command under a lock held across hosts (a distributed flock), see who
holds which lock, take a lock away from a stuck holder, and measure a server.

` + urlHelp + `

run, ls, status and unlock need a shared server; demo and bench start an
embedded in-process Redis when none is configured.

Exit status: 0 on success, 1 when Redis fails, 2 for a mistake in the
command line, 128+S when signal S interrupts a command (130 for Ctrl-C);
run also passes its command's status on (see dlock run --help).`,
		SilenceErrors: true, // run prints errors, with the exit code's meaning
		SilenceUsage:  true, // a failure is not a reason to print the usage
		// No "completion" command until the command set settles.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	a.conn.addFlags(root)
	root.PersistentFlags().StringVar(&a.keyPrefix, "key-prefix", "dlock:",
		"`prefix` of the locks' keys: the applications' dlock.WithKeyPrefix")
	// Checked before any subcommand connects, so that a mistake is a usage
	// error whether or not a server answers.
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return checkKeyPrefix(a.keyPrefix) }
	root.SetHelpCommand(helpCmd(root))
	showVersion := root.Flags().Bool("version", false, "print dlock's version, its library's, and the VCS revision it was built from (as dlock version)")
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if *showVersion {
			printVersion(a.stdout)
			return nil
		}
		return cmd.Help()
	}

	root.AddCommand(
		a.runCmd(),
		a.lsCmd(),
		a.topCmd(),
		a.statusCmd(),
		a.unlockCmd(),
		a.benchCmd(),
		a.demoCmd(),
		a.versionCmd(),
	)
	markFailures(root)
	return root
}

// helpCmd is cobra's "help [command]", except that an unknown command is a
// usage error, as it is without "help".
func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "help prints the help of a command: dlock help run is dlock run --help.",
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, _, err := root.Find(args)
			if err != nil || cmd == nil {
				return usageErrorf("unknown help topic %q", strings.Join(args, " "))
			}
			return cmd.Help()
		},
	}
}

// checkKeyPrefix rejects a --key-prefix that dlock.WithKeyPrefix refuses
// (documented there: no '{' or '}', which would break the hash tag).
func checkKeyPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return usageErrorf("--key-prefix %q must not contain '{' or '}': they would break the keys' Cluster hash tag", prefix)
	}
	return nil
}

// checkLockName rejects what the library refuses as a lock name, before
// anything connects. Its rules are documented in package dlock: not empty,
// at most dlock.MaxNameLen bytes, not starting with '}'.
func checkLockName(name string) error {
	switch {
	case name == "":
		return usageErrorf("empty lock name")
	case len(name) > dlock.MaxNameLen:
		return usageErrorf("lock name of %d bytes is longer than %d", len(name), dlock.MaxNameLen)
	case strings.HasPrefix(name, "}"):
		return usageErrorf("lock name %q starts with '}', which would leave its keys without a Cluster hash tag", name)
	}
	return nil
}

// noArgs is cobra.NoArgs for a subcommand, as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%q takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// usageError is a mistake in the command line; run exits with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitStatus makes run exit with code, after printing err when it is not
// nil: how "dlock run" passes its command's exit status on, and reports
// the outcomes that have codes of their own.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitStatus) Unwrap() error { return e.err }

// failure is an error a command's RunE returned that is not a usage error;
// run exits with exitFailure.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// markFailures wraps the RunE (and the other ...E hooks) of every command
// in the tree so that their errors are failures (exit 1), unless they are
// usage errors or reject an argument (dlock.ErrInvalidArgument), which exit
// 2. Errors that cobra itself returns (unknown commands and flags, bad flag
// values) never pass through these hooks, so they stay usage errors.
func markFailures(cmd *cobra.Command) {
	for _, hook := range []*func(*cobra.Command, []string) error{
		&cmd.PersistentPreRunE, &cmd.PreRunE, &cmd.RunE, &cmd.PostRunE, &cmd.PersistentPostRunE,
	} {
		if f := *hook; f != nil {
			*hook = func(cmd *cobra.Command, args []string) error { return classify(f(cmd, args)) }
		}
	}
	for _, sub := range cmd.Commands() {
		markFailures(sub)
	}
}

// classify marks err as a usage error or a failure; exit statuses stay
// as they are.
func classify(err error) error {
	var usage usageError
	var status *exitStatus
	switch {
	case err == nil, errors.As(err, &usage), errors.As(err, &status):
		return err
	case errors.Is(err, dlock.ErrInvalidArgument):
		return usageError{err}
	}
	return &failure{err}
}
