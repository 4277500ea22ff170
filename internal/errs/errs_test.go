package errs

import (
	"errors"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

func TestIsTransient(t *testing.T) {
	for msg, want := range map[string]bool{
		"LOADING Redis is loading the dataset in memory":                    true,
		"READONLY You can't write against a read only replica.":             true,
		"TRYAGAIN Multiple keys request during rehashing of slot":           true,
		"WRONGTYPE Operation against a key holding the wrong kind of value": false,
		"NOAUTH Authentication required.":                                   false,
	} {
		if got := IsTransient(&driver.ReplyError{Msg: msg}); got != want {
			t.Errorf("IsTransient(%q) = %v, want %v", msg, got, want)
		}
	}
	if !IsTransient(errors.New("dial tcp: connection refused")) {
		t.Error("a connection failure is transient")
	}
}

func TestConflictRepliesFromEveryServer(t *testing.T) {
	for msg, want := range map[string]string{
		"WRONGTYPE Operation against a key holding the wrong kind of value script: 5c83, on @user_script:1.":                   "WRONGTYPE Operation against a key holding the wrong kind of value",
		"DLOCK_CONFLICT dlock:{x} holds a value with no expiry that no lock wrote":                                             "dlock:{x} holds a value with no expiry that no lock wrote",
		"ERR user_script:12: DLOCK_CONFLICT the fencing key k does not hold a number script: 9f0e, on @user_script:12.":        "the fencing key k does not hold a number",
		"ERR Error compiling script (new function): user_script:3: WRONGTYPE Operation against a key":                          "WRONGTYPE Operation against a key",
		"ERR Error compiling script (new function): DLOCK_CONFLICT k holds a value stack traceback:  [G]: in function 'error'": "k holds a value",
	} {
		if !IsConflictReply(msg) {
			t.Errorf("IsConflictReply(%q) = false", msg)
		}
		if got := ConflictDetail(msg); got != want {
			t.Errorf("ConflictDetail(%q) = %q, want %q", msg, got, want)
		}
	}
	if IsConflictReply("NOAUTH Authentication required.") {
		t.Error("NOAUTH is not a conflict")
	}
}
