package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// statusOptions are the flags of "dlock status".
type statusOptions struct {
	json bool
}

func (a *app) statusCmd() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show who holds a lock and who waits for it",
		Long: `status shows everything dlock keeps under the lock NAME, read atomically: for
each kind of lock with state under the name (mutex, reentrant, rwmutex,
semaphore, latch), its holders with the owner info they chose (by default
host, pid and, for "dlock run", the command), mode, hold count, permits,
fencing token and remaining TTL; its waiters in the order they will be
served, with how long each keeps its place without refreshing it; and the
last fencing token issued. Mutex, FairMutex and MultiLock are one kind,
mutex.

--json prints a JSON array of the name's locks, in the format of "dlock ls
--json" ([] when the name has no state).

Exit status: 0, whether the lock is held or not; 1 when Redis fails or a key
holds something dlock did not write; 2 for invalid flags or lock name, or no
Redis server configured.`,
		Example: `  dlock status nightly-report
  dlock status --json orders:1001 | jq '.[0].holders[0].info'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("status takes one lock name, got %d arguments", len(args))
			}
			return checkLockName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.status(cmd.Context(), o, args[0])
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON instead of text (see dlock ls --help)")
	return cmd
}

func (a *app) status(ctx context.Context, o *statusOptions, name string) error {
	s, err := a.openSession(ctx, false)
	if err != nil {
		return err
	}
	defer s.Close()
	infos, err := s.c.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(a.stdout, infos)
	}
	if len(infos) == 0 {
		fmt.Fprintf(a.stdout, "%q: no lock state (never used, or expired)\n", name)
		return nil
	}
	for i, info := range infos {
		if i > 0 {
			fmt.Fprintln(a.stdout)
		}
		writeStatus(a.stdout, info)
	}
	return nil
}

// writeStatus prints one kind of lock under a name: a summary line, then a
// table of holders and waiters.
func writeStatus(w io.Writer, info dlock.LockInfo) {
	fmt.Fprintf(w, "%q %s: %s\n", info.Name, info.Kind, statusLine(info))
	if len(info.Holders) == 0 && len(info.Waiters) == 0 {
		return
	}
	t := newTable()
	t.AppendHeader(table.Row{"  role", "#", "owner", "info", "mode", "holds", "permits", "token", "ttl", "held", "waited", "lease left"})
	for _, h := range info.Holders {
		t.AppendRow(table.Row{"  holder", "", shortOwner(h.Owner), h.Info, h.Mode, count(h.Holds), count(h.Permits),
			formatToken(h.Token), formatTTL(h.TTL), formatTTL(h.HeldFor), "", ""})
	}
	for _, wt := range info.Waiters {
		t.AppendRow(table.Row{"  waiter", wt.Position, shortOwner(wt.Owner), wt.Info, wt.Mode, "", count(wt.Permits),
			"", "", "", formatTTL(wt.WaitedFor), formatTTL(wt.LeaseLeft)})
	}
	fmt.Fprintln(w, t.Render())
}

// statusLine summarises a kind of lock in a few words.
func statusLine(info dlock.LockInfo) string {
	if info.Kind == dlock.KindLatch {
		return fmt.Sprintf("count %d, expires in %s unless counted down or set again", info.Count, formatTTL(info.TTL))
	}
	var parts []string
	switch n := len(info.Holders); {
	case n == 0:
		parts = append(parts, "free")
	case info.Kind == dlock.KindSemaphore:
		parts = append(parts, "held by "+plural(int64(n), "holder", "holders"))
	case info.Kind == dlock.KindRWMutex && info.Holders[0].Mode == dlock.ModeRead:
		parts = append(parts, "held by "+plural(int64(n), "reader", "readers"))
	case info.Kind == dlock.KindRWMutex:
		parts = append(parts, "held by a writer")
	default:
		parts = append(parts, "held")
	}
	if info.Kind == dlock.KindSemaphore {
		if info.Permits > 0 {
			parts = append(parts, fmt.Sprintf("limit %d (stored by SetPermits or AddPermits)", info.Permits))
		} else {
			parts = append(parts, "limit set by its users")
		}
	}
	parts = append(parts, fmt.Sprintf("%d waiting", len(info.Waiters)))
	if info.LastToken != 0 {
		parts = append(parts, fmt.Sprintf("last token %d", info.LastToken))
	}
	return strings.Join(parts, ", ")
}

// count shows a count, or nothing for 0 (a field that does not apply).
func count(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}
