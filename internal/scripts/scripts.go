// Package scripts holds dlock's Lua scripts, one operation per .lua file,
// each opening with its KEYS, ARGV and Returns contract.
//
// Scripts that share helpers get lock_lib.lua prepended at package init (the
// helpers each calls, see shake), so each remains one self-contained body
// for EVALSHA/EVAL. Fencing tokens are
// issued by fence_lib.lua alone, copied into each script that grants (see
// expand).
package scripts

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

var (
	//go:embed fence_lib.lua
	fenceLib string
	//go:embed lock_lib.lua
	lockLibBody string
	//go:embed mutex_acquire.lua
	mutexAcquire string
	//go:embed mutex_release.lua
	mutexRelease string
	//go:embed mutex_transfer.lua
	mutexTransfer string
	//go:embed reentrant_lib.lua
	reentrantLib string
	//go:embed reentrant_acquire.lua
	reentrantAcquire string
	//go:embed reentrant_release.lua
	reentrantRelease string
	//go:embed reentrant_holds.lua
	reentrantHolds string
	//go:embed reentrant_transfer.lua
	reentrantTransfer string
	//go:embed multi_acquire.lua
	multiAcquire string
	//go:embed multi_release.lua
	multiRelease string
	//go:embed owned_extend.lua
	ownedExtend string
	//go:embed held_record.lua
	heldRecord string
	//go:embed owned_pttl.lua
	ownedPTTL string
	//go:embed owned_release.lua
	ownedRelease string
	//go:embed owned_transfer.lua
	ownedTransfer string
	//go:embed redlock_acquire.lua
	redlockAcquire string
	//go:embed queue_keep.lua
	queueKeep string
)

var (
	// MutexAcquire takes a queued lock or joins its queue (mutex_acquire.lua).
	MutexAcquire = withLib(lockLib, mutexAcquire)
	// MutexRelease releases a queued lock with hand-off, or leaves its queue
	// (mutex_release.lua).
	MutexRelease = withLib(lockLib, mutexRelease)
	// MutexTransfer passes a held lock to a new owner of the holder's
	// process (mutex_transfer.lua).
	MutexTransfer = driver.NewScript(expand(mutexTransfer))
	// ReentrantAcquire takes a reentrant lock or a further hold on it
	// (reentrant_acquire.lua).
	ReentrantAcquire = withLib(lockLib+"\n"+reentrantLib, reentrantAcquire)
	// ReentrantRelease releases one hold of a reentrant lock
	// (reentrant_release.lua).
	ReentrantRelease = withLib(lockLib+"\n"+reentrantLib, reentrantRelease)
	// ReentrantTransfer releases one hold of a reentrant lock and passes
	// the lock to a hold of the holder's process when it was the last
	// (reentrant_transfer.lua).
	ReentrantTransfer = driver.NewScript(expand(reentrantTransfer))
	// ReentrantHolds counts an owner's holds (reentrant_holds.lua).
	ReentrantHolds = driver.NewScript(reentrantHolds)
	// MultiAcquire takes several mutexes of one slot at once, all or none
	// (multi_acquire.lua).
	MultiAcquire = withLib(lockLib, multiAcquire)
	// MultiRelease releases several mutexes of one slot and one owner at
	// once, those that nobody waits for (multi_release.lua).
	MultiRelease = driver.NewScript(multiRelease)
	// OwnedExtend re-arms an owned key's expiry (owned_extend.lua).
	OwnedExtend = driver.NewScript(ownedExtend)
	// HeldRecord records when a hold began (held_record.lua).
	HeldRecord = driver.NewScript(heldRecord)
	// OwnedPTTL reads an owned key's remaining time (owned_pttl.lua).
	OwnedPTTL = driver.NewScript(ownedPTTL)
	// OwnedRelease deletes an owned key (owned_release.lua).
	OwnedRelease = driver.NewScript(ownedRelease)
	// OwnedTransfer passes an owned key to a new owner (owned_transfer.lua).
	OwnedTransfer = driver.NewScript(ownedTransfer)
	// RedlockAcquire takes one Redlock node's share of a lock
	// (redlock_acquire.lua).
	RedlockAcquire = driver.NewScript(redlockAcquire)
	// QueueKeep renews the queue leases of several waiters of one lock
	// (queue_keep.lua).
	QueueKeep = withLib(lockLib, queueKeep)
)

// withLib builds a script from helpers and a body. A body with a line
// "--@lib" gets the helpers there instead of at the top: code above it (a
// fast path that returns early) runs without paying for defining them,
// which costs more than a few Redis commands. Only the helpers the body
// needs go in (shake).
func withLib(lib, body string) *driver.Script {
	body = expand(body)
	lib = shake(lib, body)
	const marker = "\n--@lib\n"
	if i := strings.Index(body, marker); i >= 0 {
		return driver.NewScript(body[:i+1] + lib + "\n" + body[i+len(marker):])
	}
	return driver.NewScript(lib + "\n" + body)
}

// Fencing tokens are issued in one place, fence_lib.lua: its block (between
// "--@block" and "--@end") is the only Lua that issues a token, and the
// functions after it go in front of lock_lib.lua. The block is copied as
// text into every script that grants, at each line "--@fence(key,
// retention)", rather than called as a function: the acquire scripts' fast
// paths run before any helper is defined, because defining a Lua function
// costs the server, on every call, more than a Redis command, and a fast
// path that called a fence function would pay that on every lock.
var (
	fenceBlock, refusedBlock, fenceFuncs = splitFenceLib(fenceLib)
	// lockLib is lock_lib.lua with the fence functions it builds on.
	lockLib = expand(fenceFuncs) + "\n" + lockLibBody
)

// splitFenceLib returns fence_lib.lua's issuing block, its refusal block
// and its functions, which follow them.
func splitFenceLib(src string) (block, refused, funcs string) {
	block, rest := cutBlock(src, "--@block")
	refused, funcs = cutBlock(rest, "--@refused")
	return block, refused, funcs
}

// cutBlock returns the lines of src between the line name and the next
// line "--@end", and what follows that line.
func cutBlock(src, name string) (block, rest string) {
	begin, end := "\n"+name+"\n", "\n--@end\n"
	i := strings.Index(src, begin)
	j := strings.Index(src[max(i, 0):], end) + max(i, 0)
	if i < 0 || j < i {
		panic("scripts: fence_lib.lua has no " + name + " ... --@end")
	}
	return src[i+len(begin) : j+1], src[j+len(end):]
}

// fenceParams are the names fence_lib.lua's block uses for its arguments.
var fenceParams = regexp.MustCompile(`\b(fence_key|retention_ms)\b`)

// expand replaces, in a script's source, each line "--@fence(key,
// retention)" with fence_lib.lua's block, its fence_key and retention_ms
// replaced by the two Lua expressions given, each line
// "--@fence_refused(key)" with its refusal block, and each line
// "--@fence_lib" with fence_lib.lua's functions, indented as the line is. A malformed
// directive panics: the package's tests load every script.
func expand(src string) string {
	if !strings.Contains(src, "--@fence") {
		return src
	}
	lines := strings.SplitAfter(src, "\n")
	var b strings.Builder
	for _, line := range lines {
		text := strings.TrimRight(line, "\n")
		directive := strings.TrimLeft(text, " ")
		indent := text[:len(text)-len(directive)]
		switch {
		case directive == "--@fence_lib":
			b.WriteString(indented(indent, expand(fenceFuncs)))
		case strings.HasPrefix(directive, "--@fence("):
			args := fenceArgs(strings.TrimPrefix(directive, "--@fence"))
			b.WriteString(indented(indent, withFenceArgs(fenceBlock, args[0], args[1])))
		case strings.HasPrefix(directive, "--@fence_refused("):
			args := directiveArgs(strings.TrimPrefix(directive, "--@fence_refused"))
			if len(args) != 1 || args[0] == "" {
				panic(fmt.Sprintf("scripts: %s: want (key)", directive))
			}
			b.WriteString(indented(indent, expand(withFenceArgs(refusedBlock, args[0], ""))))
		default:
			b.WriteString(line)
		}
	}
	return b.String()
}

// withFenceArgs is block with fence_key and retention_ms replaced by the
// Lua expressions key and retention.
func withFenceArgs(block, key, retention string) string {
	return fenceParams.ReplaceAllStringFunc(block, func(name string) string {
		if name == "fence_key" {
			return key
		}
		return retention
	})
}

// fenceArgs parses "(key, retention)", two Lua expressions that may hold
// calls, indexing and strings, into the two.
func fenceArgs(s string) [2]string {
	args := directiveArgs(s)
	if len(args) != 2 || args[0] == "" || args[1] == "" {
		panic(fmt.Sprintf("scripts: --@fence%s: want (key, retention)", s))
	}
	return [2]string{args[0], args[1]}
}

// directiveArgs parses a directive's "(a, b, ...)", Lua expressions that
// may hold calls, indexing and strings, into its arguments.
func directiveArgs(s string) []string {
	var args []string
	depth, start := 0, 1
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
			if depth == 0 && i != len(s)-1 {
				panic(fmt.Sprintf("scripts: text after --@fence%s", s))
			}
		case c == ',' && depth == 1:
			args = append(args, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if depth != 0 || quote != 0 || !strings.HasPrefix(s, "(") || !strings.HasSuffix(s, ")") {
		panic(fmt.Sprintf("scripts: unbalanced --@fence%s", s))
	}
	return append(args, strings.TrimSpace(s[start:len(s)-1]))
}

// indented prefixes every non-empty line of text with indent.
func indented(indent, text string) string {
	if indent == "" {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = indent + l
		}
	}
	return strings.Join(lines, "")
}

// The read-write lock's scripts get lock_lib.lua and then rw_lib.lua.
var (
	//go:embed rw_lib.lua
	rwLib string
	//go:embed rw_acquire.lua
	rwAcquire string
	//go:embed rw_release.lua
	rwRelease string
	//go:embed rw_extend.lua
	rwExtend string
	//go:embed rw_pttl.lua
	rwPTTL string
	//go:embed rw_downgrade.lua
	rwDowngrade string
	//go:embed rw_transfer.lua
	rwTransfer string

	// RWAcquire takes a read-write lock in one mode, or joins its queue
	// (rw_acquire.lua).
	RWAcquire = withLib(lockLib+"\n"+rwLib, rwAcquire)
	// RWRelease releases one holder of a read-write lock and grants the
	// waiters that unblocks, or leaves its queue (rw_release.lua).
	RWRelease = withLib(lockLib+"\n"+rwLib, rwRelease)
	// RWTransfer passes a write lock to a writer of the holder's process
	// (rw_transfer.lua).
	RWTransfer = driver.NewScript(expand(rwTransfer))
	// RWExtend re-arms a read-write lock holder's expiry (rw_extend.lua).
	RWExtend = withLib(lockLib+"\n"+rwLib, rwExtend)
	// RWPTTL reads a read-write lock holder's remaining time (rw_pttl.lua).
	RWPTTL = withLib(lockLib+"\n"+rwLib, rwPTTL)
	// RWDowngrade turns a writer into a reader atomically (rw_downgrade.lua).
	RWDowngrade = withLib(lockLib+"\n"+rwLib, rwDowngrade)
)

// The semaphore's scripts share sem_lib.lua, which builds on lock_lib.lua's
// queue; the latch's share latch_lib.lua.
var (
	//go:embed sem_lib.lua
	semLib string
	//go:embed sem_acquire.lua
	semAcquire string
	//go:embed sem_release.lua
	semRelease string
	//go:embed sem_transfer.lua
	semTransfer string
	//go:embed sem_set_permits.lua
	semSetPermits string
	//go:embed sem_extend.lua
	semExtend string
	//go:embed sem_pttl.lua
	semPTTL string
	//go:embed sem_available.lua
	semAvailable string
	//go:embed latch_lib.lua
	latchLib string
	//go:embed latch_try_set.lua
	latchTrySet string
	//go:embed latch_count_down.lua
	latchCountDown string
	//go:embed latch_count.lua
	latchCount string
)

var (
	// SemAcquire takes a semaphore's permits or joins its queue
	// (sem_acquire.lua).
	SemAcquire = withLib(lockLib+"\n"+semLib, semAcquire)
	// SemRelease gives permits back, all or some, and serves waiters, or
	// leaves the queue (sem_release.lua).
	SemRelease = withLib(lockLib+"\n"+semLib, semRelease)
	// SemTransfer passes a holder's permits to a waiter of its process
	// (sem_transfer.lua).
	SemTransfer = driver.NewScript(expand(semTransfer))
	// SemSetPermits sets a semaphore's limit or adds to it
	// (sem_set_permits.lua).
	SemSetPermits = withLib(lockLib+"\n"+semLib, semSetPermits)
	// SemExtend renews a holder's permits (sem_extend.lua).
	SemExtend = withLib(lockLib+"\n"+semLib, semExtend)
	// SemPTTL reads a holder's remaining time (sem_pttl.lua).
	SemPTTL = withLib(lockLib+"\n"+semLib, semPTTL)
	// SemAvailable reads a semaphore's limit and use (sem_available.lua).
	SemAvailable = withLib(lockLib+"\n"+semLib, semAvailable)
	// LatchTrySet sets a latch's count when it is at zero (latch_try_set.lua).
	LatchTrySet = withLib(latchLib, latchTrySet)
	// LatchCountDown decrements a latch's count (latch_count_down.lua).
	LatchCountDown = withLib(latchLib, latchCountDown)
	// LatchCount reads a latch's count (latch_count.lua).
	LatchCount = withLib(latchLib, latchCount)
)

// Inspection reads every primitive's keys under one name at once.
var (
	//go:embed inspect.lua
	inspect string

	// Inspect reads the state of every kind of primitive under one name,
	// writing nothing (inspect.lua).
	Inspect = driver.NewScript(inspect)
)
