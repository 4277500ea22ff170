package dlock

import (
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
)

// lockKeys names the keys of one queued lock. Every key of name N is
// "<prefix>{N}<suffix>": the braces make N the Cluster hash tag, so all of
// them live in one slot and one script can touch them together. The
// notification channel is the lock key itself (channels and keys are
// separate namespaces in Redis), so it hashes to the same slot for SPUBLISH;
// a FairMutex's waiters hear their grants on a channel of their Client's,
// the lock key followed by ":g" and the Client's tag, in the same slot
// (Mutex.grants).
type lockKeys struct {
	lock    string // the holder's owner value, with PX
	fence   string // last fencing token issued
	queue   string // waiting owners by arrival
	waiters string // waiting owners' leases
	held    string // when the holder's hold began, once a renewal recorded it
}

func newLockKeys(prefix, name string) lockKeys {
	// All five keys are slices of one string: one allocation, not six.
	n := len(prefix) + len(name) + 2
	s := prefix + "{" + name + "}" + prefix + "{" + name + "}:fence" + prefix + "{" + name + "}:q" + prefix + "{" + name + "}:w" +
		prefix + "{" + name + "}:held"
	return splitLockKeys(s, n)
}

// newFairKeys is newLockKeys, and the grant channel of a Client whose
// grantTag is tag, in the same allocation.
func newFairKeys(prefix, name, tag string) (k lockKeys, grants string) {
	n := len(prefix) + len(name) + 2
	s := prefix + "{" + name + "}" + prefix + "{" + name + "}:fence" + prefix + "{" + name + "}:q" + prefix + "{" + name + "}:w" +
		prefix + "{" + name + "}:held" + prefix + "{" + name + "}:g" + tag
	return splitLockKeys(s, n), s[5*n+15:]
}

// newLockKeysAt names the keys of a queued lock whose lock key is base.
func newLockKeysAt(base string) lockKeys {
	return splitLockKeys(base+base+":fence"+base+":q"+base+":w"+base+":held", len(base))
}

// splitLockKeys cuts s, the five keys of a lock whose key has n bytes
// written one after the other (then, for newFairKeys, its grant channel),
// into its keys.
func splitLockKeys(s string, n int) lockKeys {
	return lockKeys{
		lock:    s[:n],
		fence:   s[n : 2*n+6],
		queue:   s[2*n+6 : 3*n+8],
		waiters: s[3*n+8 : 4*n+10],
		held:    s[4*n+10 : 5*n+15],
	}
}

// keyFamily sets keys[i] to prefix+"{"+name+"}"+kind+suffixes[i] for each
// suffix, and returns tail as a string, all cut from one string: the keys
// of a Semaphore, RWMutex or ReentrantMutex descriptor and its own script
// argument (the Semaphore's settings; nil for the others) in one
// allocation, as a Mutex's are. The descriptors are made per call, and
// each keeps its keys in arrays inside its own allocation.
func keyFamily(keys []string, tail []byte, prefix, name, kind string, suffixes ...string) string {
	n := len(prefix) + len(name) + 2 + len(kind)
	total := len(tail)
	for _, s := range suffixes {
		total += n + len(s)
	}
	var b strings.Builder
	b.Grow(total)
	for _, s := range suffixes {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(name)
		b.WriteByte('}')
		b.WriteString(kind)
		b.WriteString(s)
	}
	b.Write(tail)
	all := b.String()
	for i, s := range suffixes {
		keys[i], all = all[:n+len(s)], all[n+len(s):]
	}
	return all
}

// array returns the keys in the order of the Mutex scripts' KEYS (held is
// the renewals' only). It is an
// array, not a slice, so that a call can keep it inside its own allocation.
func (k *lockKeys) array() [4]string {
	return [4]string{k.lock, k.fence, k.queue, k.waiters}
}

// list returns the keys in the order of the Mutex scripts' KEYS.
func (k *lockKeys) list() []string {
	a := k.array()
	return a[:]
}

func (k *lockKeys) channel() string { return k.lock }

// checkName validates a lock name before anything is sent.
//
// A name may contain braces: the hash tag of its keys is then the part of
// the name before its first '}', the same for every key of the lock, and
// names that share it share a Cluster slot ("{cart:7}:items" and
// "{cart:7}:total"), so one script can take both. Only a name that starts
// with '}' is refused: its tag would be empty, and Redis would hash each key
// of the lock whole, into different slots.
func checkName(name string) error {
	switch {
	case name == "":
		return errs.InvalidArgf("empty lock name")
	case len(name) > MaxNameLen:
		return errs.InvalidArgf("lock name of %d bytes is longer than %d", len(name), MaxNameLen)
	case strings.HasPrefix(name, "}"):
		return errs.InvalidArgf("lock name %q starts with '}', which would leave its keys without a Cluster hash tag", name)
	}
	return nil
}
