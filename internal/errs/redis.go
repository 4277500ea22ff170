package errs

import (
	"context"
	"errors"
	"strings"

	"github.com/dlock-go/dlock/driver"
)

// Redis wraps a failed call to Redis for operation op on name, turning
// replies that show a foreign key into ErrKeyConflict.
func Redis(op, name string, err error) error {
	var rerr *driver.ReplyError
	if errors.As(err, &rerr) && IsConflictReply(rerr.Msg) {
		detail, whose := ConflictDetail(rerr.Msg), "dlock did not write this key and leaves it untouched"
		if strings.Contains(detail, "dlock did not write") || strings.Contains(detail, "no lock wrote") {
			whose = "dlock leaves it untouched" // the detail said whose it is not
		}
		return Errorf("dlock: %s %q: %w: %s (%s: use another name or key prefix, or delete the key if it is stale)",
			op, name, ErrKeyConflict, detail, whose)
	}
	if rerr != nil {
		if hint := replyHint(rerr.Msg); hint != "" {
			return Errorf("dlock: %s %q: %w (%s)", op, name, err, hint)
		}
	}
	return Errorf("dlock: %s %q: %w", op, name, err)
}

// replyHint says what to do about the refusals that come from how the
// server is set up rather than from the lock: retrying changes nothing.
// The codes are searched anywhere: Redis 6 prefixes errors raised inside a
// script with "ERR Error running script". An ACL refusal of a command a
// script runs carries no NOPERM at all: Redis 6 and 7.0 word it "The user
// executing the script can't ...", 7.2 on "ACL failure in script".
func replyHint(msg string) string {
	switch {
	case strings.Contains(msg, "OOM command not allowed"):
		return "Redis is at its maxmemory and evicts nothing: free memory or raise maxmemory; " +
			"held locks can still be renewed and released (README: Redis configuration)"
	case strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, ": NOPERM "),
		strings.Contains(msg, "The user executing the script can't"),
		strings.Contains(msg, "ACL failure in script"):
		return "the Redis user lacks a permission dlock needs: " +
			"see the ACL rules in the README's Redis configuration section"
	}
	return ""
}

// IsConflictReply recognises a foreign key in an error reply. Servers wrap
// errors raised inside scripts differently (Redis prefixes "ERR
// user_script:1:", miniredis "ERR Error compiling script"), so the markers
// are searched anywhere in the message.
func IsConflictReply(msg string) bool {
	return strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "DLOCK_CONFLICT")
}

// ConflictDetail keeps what follows our marker (or the WRONGTYPE message),
// without the server's script location suffix (Redis's " script: ...",
// miniredis's Lua stack traceback).
func ConflictDetail(msg string) string {
	if i := strings.Index(msg, "DLOCK_CONFLICT "); i >= 0 {
		msg = msg[i+len("DLOCK_CONFLICT "):]
	} else if i := strings.Index(msg, "WRONGTYPE"); i >= 0 {
		msg = msg[i:]
	}
	for _, suffix := range []string{" script: ", " stack traceback:"} {
		if i := strings.Index(msg, suffix); i >= 0 {
			msg = msg[:i]
		}
	}
	return msg
}

// transientReplies are the error replies a server gives while it loads
// data, fails over or reshards: worth retrying.
var transientReplies = []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "NOREPLICAS"}

// IsTransient reports whether err is worth retrying while a Lock waits:
// connection failures and transientReplies. Other error replies are
// permanent, and so is a closed Redis client.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrReplicaAck) ||
		errors.Is(err, driver.ErrClientClosed) {
		return false
	}
	var rerr *driver.ReplyError
	if errors.As(err, &rerr) {
		for _, prefix := range transientReplies {
			if strings.HasPrefix(rerr.Msg, prefix) {
				return true
			}
		}
		return false
	}
	return true
}

// ReleasedAnyway reports whether err is a release script's "the lock was
// released, but ..." reply (lock_lib.lua's dlock_released_but): the
// hold is gone, deleted by that release, and its hand-off to the waiters
// failed, on a key beside the lock that dlock did not write or on the
// server's own refusal.
func ReleasedAnyway(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && strings.Contains(rerr.Msg, "the lock was released, but ")
}

// IsConflict reports whether err is (or wraps) an error reply that shows a
// foreign key.
func IsConflict(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && IsConflictReply(rerr.Msg)
}

// IsReply reports whether err is (or wraps) the server's error reply, as
// opposed to a transport failure.
func IsReply(err error) bool {
	if err == nil {
		return false // before errors.As, whose target escapes: no allocation
	}
	var rerr *driver.ReplyError
	return errors.As(err, &rerr)
}

// InFlightDone returns the Done of the call err says is still on its way
// (a driver.InFlightError), or nil.
func InFlightDone(err error) <-chan struct{} {
	var inFlight *driver.InFlightError
	if errors.As(err, &inFlight) {
		return inFlight.Done
	}
	return nil
}
