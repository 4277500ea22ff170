package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// unlockOptions are the flags of "dlock unlock".
type unlockOptions struct {
	force    bool
	owner    string
	ownerSet bool // --owner was given, even empty
}

func (a *app) unlockCmd() *cobra.Command {
	o := &unlockOptions{}
	cmd := &cobra.Command{
		Use:   "unlock --force [--owner ID] NAME",
		Short: "Release a lock held by someone else (for operators)",
		Long: `unlock --force releases everything held under the lock NAME: the holder of its
mutex, every hold of its reentrant lock, every reader or the writer of its
read-write lock, and every holder of its semaphore's permits (latches hold
nothing and are left alone). Each lock passes to its first waiters, as if its
holder had released it.

With --owner ID it releases only the holder ID and leaves the others alone:
one stuck reader of a read-write lock, one holder of a semaphore's permits.
ID is the holder's owner as "dlock status NAME" shows it (the short form is
enough), or whole, as "dlock status --json" and a program's Lease.Owner give
it, or the value the lock's key holds ("<owner>;<info>", as redis-cli GET
shows it). Every hold of a reentrant owner is released.

It is for a holder that is stuck or gone while its lock keeps being renewed,
or whose TTL is too long to wait out. The holder is not told at once: it
notices at its next renewal, within a third of its TTL, and then stops
(a "dlock run" terminates its command, see --on-lost). Until then it may
still be working, unprotected: the fencing tokens are there for that.

Without --force, unlock refuses and changes nothing.

Exit status: 0 (also when nothing was held, or nothing by ID), 1 when Redis
fails or a key holds something dlock did not write, 2 without --force, for
invalid flags or lock name, an empty --owner or a short one that several
holders share, or with no Redis server configured.`,
		Example: `  dlock status nightly-report          # who holds it?
  dlock unlock --force nightly-report
  dlock unlock --force --owner 3f2a9c1b reports-pool   # one holder only`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("unlock takes one lock name, got %d arguments", len(args))
			}
			return checkLockName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ownerSet = cmd.Flags().Changed("owner")
			return a.unlock(cmd.Context(), o, args[0])
		},
	}
	cmd.Flags().BoolVar(&o.force, "force", false, "release the lock even though this process does not hold it (required)")
	cmd.Flags().StringVar(&o.owner, "owner", "", "release only the holder with this owner `ID`, as dlock status shows it")
	return cmd
}

func (a *app) unlock(ctx context.Context, o *unlockOptions, name string) error {
	if !o.force {
		return usageErrorf("refusing to release %q without --force: it takes the lock away from whoever holds it "+
			"(see \"dlock status %s\" first)", name, name)
	}
	if o.ownerSet && o.owner == "" {
		return usageErrorf("--owner is empty: give the id of a holder of %q, as \"dlock status %s\" shows it", name, name)
	}
	s, err := a.openSession(ctx, false)
	if err != nil {
		return err
	}
	defer s.Close()
	before, _ := s.c.Inspect(ctx, name) // to say whom it released; ForceUnlock reports the errors
	var (
		n     int
		owner string // with --owner, the whole id
	)
	if o.ownerSet {
		if owner, err = resolveOwner(before, o.owner); err != nil {
			return err
		}
		n, err = s.c.ForceUnlockOwner(ctx, name, owner)
	} else {
		n, err = s.c.ForceUnlock(ctx, name)
	}
	if n == 0 && err == nil {
		if o.ownerSet {
			fmt.Fprintf(a.stdout, "%q: nothing was held by %s\n", name, o.owner)
		} else {
			fmt.Fprintf(a.stdout, "%q: nothing was held\n", name)
		}
		return nil
	}
	if n > 0 {
		fmt.Fprintf(a.stdout, "%q: released %s; it was held by:\n", name, plural(int64(n), "holder", "holders"))
		for _, info := range before {
			for _, h := range info.Holders {
				if owner == "" || h.Owner == owner {
					fmt.Fprintf(a.stdout, "  %s: %s (token %s)\n", info.Kind, ownerLabel(h.Owner, h.Info), formatToken(h.Token))
				}
			}
		}
		a.printWaitersServed(ctx, s.c, name)
	}
	return err
}

// resolveOwner returns the whole id of the holder that --owner id names:
// id itself when a holder has it, the holder's id when id is the whole
// value its key holds ("<id>;<info>", as redis-cli GET shows it), else the
// one holder whose id "dlock status" shortens to id. An id that names no
// holder is returned as it is, for ForceUnlockOwner to find nothing (or a
// holder that came since).
func resolveOwner(infos []dlock.LockInfo, id string) (string, error) {
	var matches []string
	for _, info := range infos {
		for _, h := range info.Holders {
			switch {
			case h.Owner == id:
				return id, nil
			case h.Info != "" && h.Owner+";"+h.Info == id:
				return h.Owner, nil
			case shortOwner(h.Owner) == id && !slices.Contains(matches, h.Owner):
				matches = append(matches, h.Owner)
			}
		}
	}
	switch len(matches) {
	case 0:
		return id, nil
	case 1:
		return matches[0], nil
	}
	return "", usageErrorf("--owner %s names %d holders: give the whole id, as \"dlock status --json\" shows it", id, len(matches))
}

// printWaitersServed says who holds the lock now, if a waiter got it.
func (a *app) printWaitersServed(ctx context.Context, c *dlock.Client, name string) {
	infos, err := c.Inspect(ctx, name)
	if err != nil {
		return
	}
	for _, info := range infos {
		if len(info.Holders) > 0 && info.Kind != dlock.KindLatch {
			fmt.Fprintf(a.stdout, "%q %s: now held by %s\n", name, info.Kind, holderList(info.Holders))
		}
	}
}
