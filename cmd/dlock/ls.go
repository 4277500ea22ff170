package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// lsOptions are the flags of "dlock ls".
type lsOptions struct {
	json bool
	all  bool
	held bool // the default since --all exists; still accepted
}

func (a *app) lsCmd() *cobra.Command {
	o := &lsOptions{}
	cmd := &cobra.Command{
		Use:   "ls [PATTERN]",
		Short: "List locks: holders, waiters, remaining TTLs, last fencing tokens",
		Long: `ls lists the locks whose names match PATTERN, a Redis glob ("*" any characters,
"?" one, "[abc]" a class, "\" escapes one; default: every lock), one row per
name and kind of lock (mutex, reentrant, rwmutex, semaphore, latch, election):
who holds it, how many wait and the longest wait, the
soonest a holder expires unless renewed, and the last fencing token issued.
Times are the server's. It lists the locks that are held or waited for, and
the latches still counting down (what their waiters wait for); --all adds
the free locks that still have state: a lock released recently is listed as
free while its last token is remembered (an hour).

Locks are found with SCAN over the key prefix (--key-prefix), on every
master of a Cluster, which walks the keyspace in small steps and never blocks
the server; each name is then read atomically.

--json prints a JSON array instead, one object per row:
  {"name", "kind", "last_token", "limit", "count", "ttl_ms",
   "holders": [{"owner", "info", "mode", "holds", "permits", "token", "ttl_ms",
                "held_for_ms"}],
   "waiters": [{"position", "owner", "info", "mode", "permits", "lease_left_ms",
                "waited_for_ms"}]}
Every field is always present (0 or "" where it does not apply; times in
milliseconds); fields are only ever added. "dlock status --json" prints the
same objects.

Exit status: 0 (also when nothing matches), 1 when Redis fails or a name's
keys hold something dlock did not write (the other names are still listed),
2 for invalid flags, a malformed PATTERN (an unclosed "[") or no Redis
server configured.`,
		Example: `  dlock ls
  dlock ls 'orders:*'
  dlock ls --all
  dlock ls --json | jq -r '.[] | select(.waiters | length > 0) | .name'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("ls takes at most one pattern, got %q (quote it so the shell does not expand it)", args)
			}
			if len(args) == 1 {
				return checkPattern(args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			pattern := ""
			if len(args) == 1 {
				pattern = args[0]
			}
			return a.ls(cmd.Context(), o, pattern)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON instead of a table (see above)")
	cmd.Flags().BoolVar(&o.all, "all", false, "also list the free locks that still have state")
	cmd.Flags().BoolVar(&o.held, "held", false, "list only locks that are held or waited for (the default)")
	_ = cmd.Flags().MarkHidden("held")
	return cmd
}

func (a *app) ls(ctx context.Context, o *lsOptions, pattern string) error {
	s, err := a.openSession(ctx, false)
	if err != nil {
		return err
	}
	defer s.Close()
	infos, listErr := s.c.List(ctx, pattern)
	if listErr != nil && !errors.Is(listErr, dlock.ErrKeyConflict) {
		return listErr
	}
	if !o.all {
		kept := infos[:0]
		for _, info := range infos {
			if active(info) {
				kept = append(kept, info)
			}
		}
		infos = kept
	}
	if o.json {
		if err := writeJSON(a.stdout, infos); err != nil {
			return err
		}
	} else if len(infos) == 0 {
		fmt.Fprintln(a.stderr, "no locks found")
	} else {
		t := newTable()
		t.AppendHeader(table.Row{"name", "kind", "holders", "held for", "waiting", "longest wait", "ttl", "last token"})
		for _, info := range infos {
			waiting := fmt.Sprint(len(info.Waiters))
			if info.Kind == dlock.KindLatch {
				waiting = "-"
			}
			t.AppendRow(table.Row{info.Name, info.Kind, holdersSummary(info), formatTTL(longestHold(info)), waiting,
				formatTTL(longestWait(info)), formatTTL(soonestTTL(info)), formatToken(info.LastToken)})
		}
		fmt.Fprintln(a.stdout, t.Render())
	}
	return listErr // the conflicts, after what could be listed
}

// checkPattern rejects a glob that SCAN accepts but that is never what was
// meant: a "[" that opens a class no "]" closes, which Redis runs to the end
// of the pattern ("ls '['" would quietly list nothing).
func checkPattern(pattern string) error {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++ // escapes the next byte
		case '[':
			j := i + 1
			for ; j < len(pattern) && pattern[j] != ']'; j++ {
				if pattern[j] == '\\' {
					j++
				}
			}
			if j >= len(pattern) {
				return usageErrorf("pattern %q: the \"[\" at byte %d opens a class that no \"]\" closes (write \\[ to match a \"[\")", pattern, i+1)
			}
			i = j
		}
	}
	return nil
}
