package goredis

import (
	"errors"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// The refusals retryTryAgain sends again: those a slot migration explains,
// which ran nothing. A MOVED comes back from go-redis when TRYAGAINs used
// up its redirections for the command, as the migration ends.
func TestRefusedInMigration(t *testing.T) {
	for msg, want := range map[string]bool{
		"TRYAGAIN Multiple keys request during rehashing of slot": true,
		"MOVED 14520 127.0.0.1:37653":                             true,
		"ASK 14520 127.0.0.1:37653":                               true,
		"NOSCRIPT No matching script":                             false,
		"ERR user_script:1: something":                            false,
		"MOVEDX":                                                  false,
	} {
		if got := refusedInMigration(&driver.ReplyError{Msg: msg}); got != want {
			t.Errorf("refusedInMigration(%q) = %v, want %v", msg, got, want)
		}
	}
	if refusedInMigration(errors.New("MOVED 1 127.0.0.1:1")) {
		t.Error("refusedInMigration of an error that is no reply = true")
	}
}
