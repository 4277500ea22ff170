package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/dlock-go/dlock"
)

// topOptions are the flags of "dlock top".
type topOptions struct {
	interval time.Duration
	once     bool
}

func (a *app) topCmd() *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top [PATTERN]",
		Short: "Watch the locks live: holders, hold times, waiters, waits, grants per second",
		Long: `top shows the locks whose names match PATTERN (a Redis glob, as for "dlock ls";
default: every lock) that are held or waited for, every kind (elections
included), refreshed every --interval: kind, name, the holder's owner info,
how long it has held the lock, its TTL left, how many wait, the longest
current wait, and the grants per second over the last interval (from the
fencing tokens). Times are the server's; a hold's time shows once its first
renewal recorded it (a third of its TTL after the grant; "-" before).
Rows needing attention come first: the longest wait, then the most waiters.

Keys: w longest wait first (the default), c most waiters first, h longest
held first, g most grants per second first, n by name; / filters by name
(a substring; Enter applies it, Esc clears it); q or Ctrl-C quits. The
terminal is restored on exit.

Each refresh runs one SCAN pass over the key prefix on every master, then
one read-only script per matching name (see the README for the load).

--once prints one frame as plain text and exits; it is also what top does
when its output is not a terminal. Grants per second need two frames, so
--once shows "-" there.

Exit status: 0, 1 when Redis fails, 2 for invalid flags or pattern.`,
		Example: `  dlock top
  dlock top 'orders:*' --interval 5s
  dlock top --once`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("top takes at most one pattern, got %q (quote it so the shell does not expand it)", args)
			}
			if len(args) == 1 {
				return checkPattern(args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.interval < 100*time.Millisecond {
				return usageErrorf("--interval %v: want at least 100ms", o.interval)
			}
			pattern := ""
			if len(args) == 1 {
				pattern = args[0]
			}
			return a.top(cmd.Context(), o, pattern)
		},
	}
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "time between refreshes")
	cmd.Flags().BoolVar(&o.once, "once", false, "print one plain-text frame and exit")
	return cmd
}

func (a *app) top(ctx context.Context, o *topOptions, pattern string) error {
	s, err := a.openSession(ctx, false)
	if err != nil {
		return err
	}
	defer s.Close()
	src := &topSource{c: s.c, pattern: pattern}
	if o.once || !isTerminal(a.stdout) {
		f, err := src.next(ctx)
		if err != nil {
			return err
		}
		f.sortBy(sortWait)
		fmt.Fprint(a.stdout, f.render(""))
		return nil
	}
	return runTopScreen(ctx, src, o.interval, pattern)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// topSource reads frames, keeping the last one's tokens for the grant rates.
type topSource struct {
	c       *dlock.Client
	pattern string
	last    map[rowKey]int64
	lastAt  time.Time
}

// next lists the locks and returns them as a frame, with grant rates when
// a previous frame exists. A name whose keys conflict is left out.
func (s *topSource) next(ctx context.Context) (*topFrame, error) {
	infos, err := s.c.List(ctx, s.pattern)
	if err != nil && !errors.Is(err, dlock.ErrKeyConflict) {
		return nil, err
	}
	now := time.Now()
	f := &topFrame{at: now}
	tokens := make(map[rowKey]int64, len(infos))
	for _, info := range infos {
		k := rowKey{info.Name, info.Kind}
		tokens[k] = info.LastToken
		if !active(info) {
			continue
		}
		r := topRow{info: info, rate: -1}
		if prev, ok := s.last[k]; ok && prev > 0 && info.LastToken >= prev {
			r.rate = float64(info.LastToken-prev) / now.Sub(s.lastAt).Seconds()
		}
		f.rows = append(f.rows, r)
	}
	s.last, s.lastAt = tokens, now
	return f, nil
}
